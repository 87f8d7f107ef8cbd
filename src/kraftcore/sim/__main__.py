"""`python -m kraftcore.sim --seed N` / `--seeds A..B [--voters 3|5] [--observers K]`."""

import sys

from kraftcore.sim.run import main

sys.exit(main())
