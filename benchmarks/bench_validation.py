"""Dataset validation against a bare JSON parse, on two generated datasets, with start-up and the eval_split writer.

Every figure is a ratio measured on this machine in this run, so a busy or slow host changes the seconds, not the
verdict: the CPU time of ``mtrl validate FILE --env wordle --json`` (the real entry point) over the CPU time of the
same interpreter calling ``json.loads`` on each line and nothing else, both net of start-up (the same two commands
on a 3-line file). CPU time is each child's own (``os.wait4``); each figure is the median of alternating runs
(validate, bare, validate, bare, ...), so drift in the host's load hits both sides alike.

Targets (issues 25 and 38): net ratio <= 1.5 on both datasets; peak RSS flat in the file size (the id index apart,
~24 bytes a row); every command starts within 0.3 CPU-s, `--help` included: the start-up table runs the help screens,
`config show`, a `cost` estimate and `runs` against the embedded emulator with the demo's synthesized deployment in
it (synthesized first when `.build/demo/cdk.out`, or ``MTRL_BENCH_CDK_OUT``, is stale; skipped, saying so, without
the emulator). The datasets are seeded and valid for ``--env wordle``: ``realistic`` (~370 B rows: a system + user
message list, an answer, an info object with three fields) and ``transcript`` (~3.5 KB rows: a 14-message prompt).
``MTRL_BENCH_VALIDATION_MB`` sets each one's size (default 200), ``MTRL_BENCH_PAIRS`` the number of alternating
pairs (default 3).

Children write their bytecode to a temporary cache (``PYTHONPYCACHEPREFIX``), warmed first (each command of the
start-up table is run once before it is measured), as an installed ``mtrl`` has compiled modules; the cold start-up
(no bytecode, as a checkout with PYTHONDONTWRITEBYTECODE) is printed too. The start-up table prints each command's
median and its least run: on a shared host the least is the figure nearest the command's own cost.
"""

from __future__ import annotations

import functools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.wordle.words import default_words

TARGET_RATIO = 1.5
TARGET_STARTUP_CPU_S = 0.3
TARGET_PEAK_MB = 256.0
SEED = 25
# The Validate Lambda's CPU: one full vCPU from 1,769 MB (AWS Lambda developer guide, "Memory and computing power").
LAMBDA_BUDGET_S = 600

# The eval_split benchmark's rows reuse these (one row shape for the older figures).
ANSWERS = ["crane", "slate", "pious", "mango", "vivid", "bread", "plumb", "quart", "beach", "chair"]
SYSTEM = (
    "You are playing Wordle. Guess the hidden five-letter English word in at most six guesses. After each "
    "guess you receive feedback for every letter: G means the letter is in the right place, Y means the "
    "letter is in the word but elsewhere, X means the letter is not in the word. Think step by step, keep "
    "track of the letters you have ruled out, and answer with a single lowercase five-letter word. "
) * 2

_WORDS = [
    "guess", "letter", "feedback", "place", "word", "hidden", "clue", "turn", "answer", "green", "yellow", "grey",
    "position", "vowel", "common", "try", "again", "remember", "ruled", "out", "think", "carefully", "reply",
    "only", "lowercase", "five", "letters",
]  # fmt: skip
_BARE = "import json, sys\nwith open(sys.argv[1], 'rb') as lines:\n    for line in lines:\n        json.loads(line)\n"
_SPLIT = """
import sys
from benchmarks.bench_eval_split import CountingS3
from mtrl.validation.splits import write_eval_split
with open(sys.argv[1], "rb") as body:
    write_eval_split(CountingS3(body), bucket="b", key="k", version_id=None, eval_split=0.1, out_bucket="b",
                     train_key="t", eval_key="e", max_line_bytes=1024 * 1024)
"""

# What `mtrl runs` asks of boto3, and nothing else: one session, the same two clients with the same settings
# (mtrl.client.deployment.Aws), the two DescribeStacks and the listing query. Its CPU time is the part of `mtrl runs`
# the CLI cannot cut (every AWS call goes through boto3).
_BOTO3_RUNS = """
import sys
import boto3
from botocore.config import Config
endpoint, prefix = sys.argv[1], sys.argv[2]
config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=65)
session = boto3.Session()
cloudformation = session.client("cloudformation", endpoint_url=endpoint, config=config)
dynamodb = session.client("dynamodb", endpoint_url=endpoint, config=config)
outputs = cloudformation.describe_stacks(StackName=f"{prefix}-data")["Stacks"][0]["Outputs"]
cloudformation.describe_stacks(StackName=f"{prefix}-pipeline")
table = next(item["OutputValue"] for item in outputs if item["OutputKey"] == "RunTableName")
dynamodb.query(TableName=table, IndexName="by_kind", KeyConditionExpression="kind = :kind",
               ExpressionAttributeValues={":kind": {"S": "run"}}, ScanIndexForward=False, Limit=20)
"""


@functools.cache
def _sentences(words: int) -> tuple[str, ...]:
    """A pool of seeded sentences of ``words`` words (drawn from per row: generating stays fast)."""
    rng = random.Random(SEED + words)  # noqa: S311 - seeded test data, not a secret
    return tuple(" ".join(rng.choices(_WORDS, k=words)).capitalize() + "." for _ in range(4096))


def _sentence(rng: random.Random, words: int) -> str:
    return rng.choice(_sentences(words))


def realistic_row(index: int, rng: random.Random, answers: tuple[str, ...]) -> dict[str, Any]:
    """~370 B: a system + user message list, an answer and a three-field info object."""
    return {
        "id": f"wordle-{index:09d}",
        "metadata": {
            "prompt": [
                {"role": "system", "content": _sentence(rng, 16)},
                {"role": "user", "content": f"Game {index}: " + _sentence(rng, 8)},
            ],
            "answer": rng.choice(answers),
            "info": {"seed": rng.randrange(2**31), "max_turns": 6, "difficulty": rng.choice(("easy", "hard"))},
        },
    }


def transcript_row(index: int, rng: random.Random, answers: tuple[str, ...]) -> dict[str, Any]:
    """~3.5 KB: a 14-message transcript (system, then user and assistant turns)."""
    messages = [{"role": "system", "content": _sentence(rng, 40)}]
    for turn in range(13):
        if turn % 2:
            content = f"My guess is {rng.choice(answers)}. " + _sentence(rng, 27)
            messages.append({"role": "assistant", "content": content})
        else:
            feedback = "".join(rng.choice("GYX") for _ in range(5))
            messages.append({"role": "user", "content": f"Feedback {feedback}. " + _sentence(rng, 30)})
    return {
        "id": f"transcript-{index:09d}",
        "metadata": {"prompt": messages, "answer": rng.choice(answers), "info": {"seed": index, "turns": 13}},
    }


def generate(path: Path, target_bytes: int, make_row: Callable[..., dict[str, Any]]) -> tuple[int, int]:
    """Write seeded rows until ``target_bytes``; returns (bytes, rows)."""
    answers = default_words().answers
    rng = random.Random(SEED)  # noqa: S311 - seeded test data, not a secret
    written = rows = 0
    with path.open("wb") as out:
        while written < target_bytes:
            block = "".join(json.dumps(make_row(rows + i, rng, answers)) + "\n" for i in range(2000)).encode()
            out.write(block)
            written += len(block)
            rows += 2000
    return written, rows


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    peak_mb: float
    stdout: str


def run_child(argv: list[str], env: dict[str, str]) -> Usage:
    """One child's own CPU time and peak RSS (``os.wait4``: not mixed with any other child's)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    stdout, stderr = process.stdout.read(), process.stderr.read()  # type: ignore[union-attr]
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:4]} exited {process.returncode}: {stderr.decode()[-2000:]}")
    return Usage(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout.decode())


def alternate(commands: list[list[str]], env: dict[str, str], pairs: int) -> list[list[Usage]]:
    """Run the commands in turn ``pairs`` times; each command's runs, in order."""
    runs: list[list[Usage]] = [[] for _ in commands]
    for _ in range(pairs):
        for index, argv in enumerate(commands):
            runs[index].append(run_child(argv, env))
    return runs


def median_cpu(runs: list[Usage]) -> float:
    return statistics.median(run.cpu_s for run in runs)


def _validate(path: Path) -> list[str]:
    return [sys.executable, "-m", "mtrl", "validate", str(path), "--env", "wordle", "--json"]


# Start-up of other commands (the target holds for any command): help screens and the commands that stay local.
STARTUP_COMMANDS = (
    ("--help",),
    ("--version",),
    ("config", "show"),
    ("config", "show", "--json"),
    ("cost", "--instance-type", "ml.p5.48xlarge", "--instances", "1", "--hours", "2"),
    ("env", "list", "--json"),
    ("status", "--help"),
    ("submit", "--help"),
    ("runs", "--help"),
    ("cost", "--help"),
    ("health", "--help"),
    ("render", "--help"),
    ("env", "try", "--help"),
    ("eval", "--help"),
    ("image", "build", "--help"),
    ("model", "import", "--help"),
)
# The emulator's fixed test credentials (mtrl.cli.demo.deployment.run_mtrl aims `mtrl` at it the same way).
EMULATOR_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _startup_row(arguments: tuple[str, ...] | list[str], runs: list[Usage]) -> None:
    figure = median_cpu(runs)
    verdict = _verdict(figure <= TARGET_STARTUP_CPU_S)
    least = min(run.cpu_s for run in runs)
    print(
        f"      mtrl {' '.join(arguments):<60} {figure:.2f} CPU-s, least {least:.2f} "
        f"(target <= {TARGET_STARTUP_CPU_S}: {verdict})"
    )


def _print_startup_table(env: dict[str, str], pairs: int) -> None:
    print("   start-up of each command (median CPU-s of the process, and the least of its runs):", flush=True)
    commands = [[sys.executable, "-m", "mtrl", *arguments] for arguments in STARTUP_COMMANDS]
    alternate(commands, env, 1)  # each command's modules compiled into the bytecode cache first
    for arguments, runs in zip(STARTUP_COMMANDS, alternate(commands, env, pairs), strict=True):
        _startup_row(arguments, runs)
    _runs_against_the_emulator(env, pairs)


def _runs_against_the_emulator(env: dict[str, str], pairs: int) -> None:
    """`mtrl runs` against the demo's deployment in the embedded emulator: its start-up and its AWS calls."""
    from rich.console import Console  # noqa: PLC0415 - the emulator part loads only when it runs

    from mtrl.cli.demo import REPO_ROOT  # noqa: PLC0415
    from mtrl.cli.demo.deployment import PREFIX  # noqa: PLC0415
    from mtrl.cli.demo.synth import synthesize  # noqa: PLC0415
    from mtrl.emulator import Emulator, deploy_app, find_emulator  # noqa: PLC0415
    from mtrl.emulator.deploy import session_for  # noqa: PLC0415

    if find_emulator() is None:
        print("      mtrl runs (against the emulator): skipped, the emulator is not installed (make emulator)")
        return
    cdk_out = Path(os.environ.get("MTRL_BENCH_CDK_OUT") or REPO_ROOT / ".build" / "demo" / "cdk.out")
    synthesize(cdk_out, Console(stderr=True))  # reused as it is when its inputs are unchanged
    with Emulator() as emulator:
        session = session_for(emulator.client_kwargs)
        for stack in deploy_app(session, cdk_out, stacks=[f"{PREFIX}-pipeline"]):
            if not stack.ok:
                raise RuntimeError(f"deploying {stack.stack_name} failed: {stack.status} {stack.failures}")
        arguments = ["runs", "--endpoint-url", emulator.endpoint_url, "--prefix", PREFIX]
        commands = [
            [sys.executable, "-m", "mtrl", *arguments],
            [sys.executable, "-c", _BOTO3_RUNS, emulator.endpoint_url, PREFIX],
        ]
        alternate(commands, {**env, **EMULATOR_CREDENTIALS}, 1)  # compiled first, as above
        runs, boto3_runs = alternate(commands, {**env, **EMULATOR_CREDENTIALS}, pairs)
        _startup_row(["runs", "--endpoint-url", "EMULATOR", "--prefix", PREFIX], runs)
        print(
            f"        of which boto3 alone (python, import, one session, the two clients, the same three calls): "
            f"{median_cpu(boto3_runs):.2f} CPU-s, least {min(run.cpu_s for run in boto3_runs):.2f}",
            flush=True,
        )


def _check_valid(usage: Usage, rows: int) -> None:
    document = json.loads(usage.stdout)
    if not document["valid"] or document["train"]["rows"] != rows:
        raise RuntimeError(f"the generated dataset did not validate: {usage.stdout[:2000]}")


def _verdict(ok: bool) -> str:
    return "ok" if ok else "ABOVE TARGET"


def main() -> None:
    size_mb = int(os.environ.get("MTRL_BENCH_VALIDATION_MB", "200"))
    pairs = int(os.environ.get("MTRL_BENCH_PAIRS", "3"))
    with tempfile.TemporaryDirectory(prefix="mtrl-bench-") as directory:
        root = Path(directory)
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPYCACHEPREFIX": str(root / "pycache"), "COLUMNS": "200"}
        small = root / "three.jsonl"
        generate(small, 1, realistic_row)
        small.write_bytes(b"".join(small.read_bytes().splitlines(keepends=True)[:3]))
        split = [sys.executable, "-c", _SPLIT]
        bare = [sys.executable, "-c", _BARE]
        for argv in (_validate(small), [*split, str(small)]):  # warm the bytecode cache
            run_child(argv, env)
        cold_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
        cold = median_cpu(alternate([_validate(small)], cold_env, pairs)[0])
        startup_runs = alternate([_validate(small), [*bare, str(small)], [*split, str(small)]], env, pairs * 2)
        validate_start, bare_start, split_start = (median_cpu(runs) for runs in startup_runs)
        startup_peak = max(run.peak_mb for run in startup_runs[0])
        print(
            f"   start-up (`mtrl validate` of a 3-line file): {validate_start:.2f} CPU-s "
            f"(target <= {TARGET_STARTUP_CPU_S}: {_verdict(validate_start <= TARGET_STARTUP_CPU_S)}; "
            f"{cold:.2f} CPU-s with no bytecode cache); python + json: {bare_start:.2f} CPU-s",
            flush=True,
        )
        _print_startup_table(env, pairs)
        rates: dict[str, float] = {}
        for name, make_row in (("realistic", realistic_row), ("transcript", transcript_row)):
            path = root / f"{name}.jsonl"
            started = time.perf_counter()
            size, rows = generate(path, size_mb * 1_000_000, make_row)
            generated = time.perf_counter() - started
            validate_runs, bare_runs, split_runs = alternate(
                [_validate(path), [*bare, str(path)], [*split, str(path)]], env, pairs
            )
            _check_valid(validate_runs[0], rows)
            validate_net = median_cpu(validate_runs) - validate_start
            bare_net = median_cpu(bare_runs) - bare_start
            split_net = median_cpu(split_runs) - split_start
            ratio, split_ratio = validate_net / bare_net, split_net / bare_net
            peak = max(run.peak_mb for run in validate_runs)
            rates[name] = size / 1e6 / (validate_net + split_net)
            print(
                f"   {name}: {size / 1e6:.0f} MB, {rows:,} rows (~{size // rows} B; generated in {generated:.0f} s): "
                f"validate {median_cpu(validate_runs):.2f} CPU-s, bare json.loads {median_cpu(bare_runs):.2f} CPU-s: "
                f"net ratio {ratio:.2f} (target <= {TARGET_RATIO}: {_verdict(ratio <= TARGET_RATIO)}); "
                f"{size / 1e6 / validate_net:.0f} MB per CPU-second; peak RSS {peak:.0f} MB "
                f"({startup_peak:.0f} MB on the 3-line file; target <= {TARGET_PEAK_MB:.0f}: "
                f"{_verdict(peak <= TARGET_PEAK_MB)})",
                flush=True,
            )
            print(
                f"   {name}: eval_split writer (10% held out) net ratio {split_ratio:.2f} to the bare parse, "
                f"{size / 1e6 / split_net:.0f} MB per CPU-second",
                flush=True,
            )
            path.unlink()
        slowest = min(rates.values())
        print(
            f"   Validate step (validation + eval_split files) at one vCPU of this machine: {slowest:.0f} MB per "
            f"CPU-second on the slower dataset: ~{slowest * LAMBDA_BUDGET_S / 1000:.0f} GB in "
            f"{LAMBDA_BUDGET_S // 60} minutes",
            flush=True,
        )


if __name__ == "__main__":
    main()
