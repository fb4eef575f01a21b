"""The Validate step's eval_split writer (mtrl.validation.splits): throughput and memory on a generated dataset.

Targets: >= 50 MB per CPU-second (the validator's own target, so the split at most doubles Validate's time) and
peak RSS <= 256 MB whatever the size (two 8 MiB part buffers, streamed). An ~8 MB block of rows is built once and
sent repeatedly (nothing on disk); the S3 client is an in-memory stand-in that counts what it is sent, so the figure
is the writer's own (``bench_validation`` also runs the writer over its generated files, as a ratio to a bare parse).
The writer runs in a child process so its peak RSS is measured alone. ``MTRL_BENCH_SPLIT_MB`` changes the size.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from typing import Any

from benchmarks.bench_validation import ANSWERS, SYSTEM

TARGET_MB_PER_S = 50.0
TARGET_PEAK_MB = 256.0

_CHILD = """
import json, sys, time
from benchmarks.bench_eval_split import CountingS3, RepeatedBlock
from mtrl.validation.splits import write_eval_split

s3 = CountingS3(RepeatedBlock(int(sys.argv[1])))
started, cpu = time.perf_counter(), time.process_time()
files = write_eval_split(s3, bucket="b", key="k", version_id=None, eval_split=0.1, out_bucket="b",
                         train_key="t", eval_key="e", max_line_bytes=1024 * 1024)
print(json.dumps({"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                  "bytes": s3.bytes, "parts": s3.parts,
                  "rows": files.train_rows + files.eval_rows, "eval_rows": files.eval_rows}))
"""


class RepeatedBlock:
    """A body of ~8 MB of rows built once and sent again and again (the writer never checks ids are unique)."""

    def __init__(self, target: int) -> None:
        rows = []
        for i in range(6000):
            metadata = {
                "prompt": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Game {i}: make your first guess."},
                ],
                "answer": ANSWERS[i % len(ANSWERS)],
                "task": "wordle",
                "info": {"seed": i, "max_turns": 6},
            }
            rows.append(json.dumps({"id": f"wordle-{i:09d}", "metadata": metadata}, separators=(",", ":")))
        self.block = ("\n".join(rows) + "\n").encode()
        self.target, self.sent = target, 0

    def read(self, size: int = -1) -> bytes:
        if self.sent >= self.target:
            return b""
        self.sent += len(self.block)
        return self.block

    def close(self) -> None:
        pass


class CountingS3:
    """The S3 calls the writer makes, counting the bytes it is sent; ``get_object`` returns ``body``."""

    def __init__(self, body: Any) -> None:
        self.body, self.bytes, self.parts = body, 0, 0

    def get_object(self, **_: Any) -> dict[str, Any]:
        return {"Body": self.body}

    def put_object(self, Body: bytes, **_: Any) -> None:
        self.bytes += len(Body)

    def create_multipart_upload(self, **_: Any) -> dict[str, str]:
        return {"UploadId": "u"}

    def upload_part(self, Body: bytes, **_: Any) -> dict[str, str]:
        self.bytes += len(Body)
        self.parts += 1
        return {"ETag": str(self.parts)}

    def complete_multipart_upload(self, **_: Any) -> None:
        pass


def main() -> None:
    size = int(os.environ.get("MTRL_BENCH_SPLIT_MB", "512")) * 1024 * 1024
    output = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(output.strip().splitlines()[-1])
    cpu = result["cpu"]  # the writer's own CPU time (the rows are built once, before it starts)
    peak_mb = usage.ru_maxrss / 1024
    rate = result["bytes"] / 1e6 / cpu
    ok_rate = "ok" if rate >= TARGET_MB_PER_S else "BELOW TARGET"
    ok_mem = "ok" if peak_mb <= TARGET_PEAK_MB else "ABOVE TARGET"
    print(
        f"   {result['rows']} rows ({result['eval_rows']} held out), {result['bytes'] / 1e6:.0f} MB written in "
        f"{result['parts']} parts: {rate:.0f} MB per CPU-second (target >= {TARGET_MB_PER_S:.0f}: "
        f"{ok_rate}; wall {result['bytes'] / 1e6 / result['seconds']:.0f} MB/s), peak RSS {peak_mb:.0f} MB "
        f"(target <= {TARGET_PEAK_MB:.0f}: {ok_mem})",
        flush=True,
    )


if __name__ == "__main__":
    main()
