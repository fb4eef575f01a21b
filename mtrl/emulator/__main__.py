"""Run the embedded emulator by hand: ``python -m mtrl.emulator [--cdk-out DIR [--stack NAME ...]]``.

Starts MiniStack on 127.0.0.1, optionally deploys a synthesized app into it, prints the endpoint and the
stack outputs as JSON, and keeps running until interrupted (Ctrl-C), then stops it cleanly.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from mtrl.emulator.deploy import deploy_app, session_for
from mtrl.emulator.process import Emulator, EmulatorError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtrl.emulator", description=__doc__)
    parser.add_argument("--cdk-out", type=Path, help="a synthesized app to deploy (cdk synth -o DIR)")
    parser.add_argument("--stack", action="append", help="deploy only this stack and its dependencies (repeatable)")
    parser.add_argument("--port", type=int, help="gateway port (default: a free one)")
    parser.add_argument("--sfn-wait-scale", default="0.05", help="Step Functions Wait-state scale (default 0.05)")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        with Emulator(port=args.port, environ={"SFN_WAIT_SCALE": args.sfn_wait_scale}) as emulator:
            report: dict[str, object] = {"endpoint_url": emulator.endpoint_url, "startup_s": emulator.startup_seconds}
            if args.cdk_out:
                deployments = deploy_app(session_for(emulator.client_kwargs), args.cdk_out, stacks=args.stack)
                report["stacks"] = [
                    {
                        "name": d.stack_name,
                        "status": d.status,
                        "seconds": round(d.seconds, 2),
                        "outputs": d.outputs,
                        "failures": d.failures,
                    }
                    for d in deployments
                ]
                if not all(d.ok for d in deployments):
                    print(json.dumps(report, indent=2))
                    return 1
            print(json.dumps(report, indent=2), flush=True)
            print("emulator running; Ctrl-C stops it", file=sys.stderr, flush=True)
            stop.wait()
    except EmulatorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
