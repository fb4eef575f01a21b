"""``python -m mtrl.backends.local_llm OUTPUT_URI RUN_ID``: train a local-backend language-model run in this
interpreter (one with the ``mtrl[llm]`` extra), reading and writing its state under ``OUTPUT_URI/local/``.

The backend function starts it when its own runtime has no torch (see ``mtrl.backends.local``); the state it
leaves is what the function reads back, so the run's summary, plot and signal rows are the same either way.
"""

from __future__ import annotations

import os
import sys

from mtrl.backends._aws import AwsClients, S3Uri
from mtrl.backends.local import OUTPUT_FOLDER, S3Store, _stamp_step
from mtrl.local.run import advance_run


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m mtrl.backends.local_llm OUTPUT_URI RUN_ID", file=sys.stderr)
        return 2
    output_uri, run_id = argv

    s3 = AwsClients().client("s3", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    store = S3Store(s3, S3Uri.parse(output_uri).join(OUTPUT_FOLDER + "/"))
    advance_run(store, extra_summary={"run_id": run_id}, on_step=_stamp_step)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
