"""``python -m accel.adbench.gradbench``: serve GradBench's protocol on stdin/stdout.

Before anything else is imported, file descriptor 1 is redirected to stderr and the
responses go to a private duplicate of the original stdout: whatever numba, accel or a C
library prints can then never corrupt the protocol stream.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from .protocol import Tool
    tool = Tool()
    for line in sys.stdin:
        if not line.strip():
            continue
        resp = tool.handle_line(line)
        out.write(json.dumps(resp) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
