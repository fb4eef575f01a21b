"""A fake of the Forge-enabled HyperPod v2 CLI (`hyperpod`), first on PATH in the contract tests (bin/hyperpod runs
it, stdlib only, with ``-S``).

It records its argv to $NOVA_FAKE_AWS/hyperpod.jsonl and prints what the SDK's own parsing code reads:

- `connect-cluster --cluster-name C --namespace N`: nothing on stdout or stderr (SMHPRuntimeManager.setup and
  SMHPStatusManager._connect_cluster pass stderr to _check_hyperpod_stderr, which fails on non-benign lines).
- `start-job --namespace N --recipe R --override-parameters J`: the helm-install style report whose `NAME: <job>`
  line SMHPRuntimeManager.execute extracts with `re.search(r"NAME: (\\S+)", stdout)`. The job is named after the
  recipe file, which must exist where RecipeBuilder._generate_recipe_path wrote it, inside the installed
  hyperpod_cli package ($FAKE_HYPERPOD_RECIPES/<R>.yaml): the image must let uid 10001 write there.
- `get-job --job-name J`: the JSON SMHPStatusManager.get_job_status reads: `Status` null while pending, else
  `Status.conditions[-1].type` (Created/Running/Succeeded/Failed) and `Status.startTime`.
- `cancel-job --job-name J --namespace N`: a confirmation line (SMHPRuntimeManager.cleanup only checks stderr).

Job progress is driven by the test through $NOVA_FAKE_AWS/hyperpod.json (`{"jobs": {name: {"conditions": […]}}}`).
"""

import json
import os
import sys
from pathlib import Path

STATE = Path(os.environ["NOVA_FAKE_AWS"])
argv = sys.argv[1:]
with open(STATE / "hyperpod.jsonl", "a") as log:
    log.write(json.dumps(argv) + "\n")


def option(name: str) -> str:
    return argv[argv.index(name) + 1]


state_path = STATE / "hyperpod.json"
state = json.loads(state_path.read_text()) if state_path.exists() else {"jobs": {}}
command = argv[0] if argv else ""

if command == "connect-cluster":
    option("--cluster-name"), option("--namespace")
elif command == "start-job":
    recipe = Path(os.environ["FAKE_HYPERPOD_RECIPES"]) / f"{option('--recipe')}.yaml"
    if not recipe.is_file():
        print(f"Error: recipe {recipe} not found", file=sys.stderr)
        sys.exit(1)
    json.loads(option("--override-parameters"))
    name = recipe.stem
    state["jobs"][name] = {"namespace": option("--namespace"), "conditions": [{"type": "Created"}]}
    state_path.write_text(json.dumps(state))
    print(f"NAME: {name}\nLAST DEPLOYED: Tue Dec  1 10:00:00 2026\nNAMESPACE: {option('--namespace')}")
    print("STATUS: deployed\nREVISION: 1\nTEST SUITE: None")
elif command == "get-job":
    job = state["jobs"].get(option("--job-name"))
    if job is None:
        print(f"Error: job {option('--job-name')} not found", file=sys.stderr)
        sys.exit(1)
    status = {"conditions": job["conditions"], "startTime": "2026-12-01T10:00:00Z"} if job["conditions"] else None
    print(json.dumps({"Name": option("--job-name"), "Namespace": job["namespace"], "Status": status}))
elif command == "cancel-job":
    name = option("--job-name")
    if name not in state["jobs"]:
        print(f"Error: job {name} not found", file=sys.stderr)
        sys.exit(1)
    state["jobs"][name]["cancelled"] = True
    state_path.write_text(json.dumps(state))
    print(f"Job {name} deleted")
else:
    print(f"fake hyperpod: unsupported command {argv}", file=sys.stderr)
    sys.exit(2)
