"""A command-line "agent" for tests/test_shim.py: prints ``line-00001`` … ``line-COUNT``, stopping
after line HALF until the file GATE exists (so a test can restart the daemon mid-stream).

    numbered_agent.py "COUNT HALF GATE [DONE]"   (one argument, the prompt, split here)

With DONE, it makes that file once every line is written.
"""

from __future__ import annotations

import os
import sys
import time

words = sys.argv[1].split()
count, half, gate = int(words[0]), int(words[1]), words[2]
for i in range(1, count + 1):
    sys.stdout.write(f"line-{i:05d}\n")
    if i == half:
        sys.stdout.flush()
        while not os.path.exists(gate):  # the gate: the worker's own wait, the test never sleeps
            time.sleep(0.02)
sys.stdout.flush()
if len(words) > 3:  # a file that says every line is written
    open(words[3], "w").close()
