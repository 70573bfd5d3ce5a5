"""``python -m model.dynamics ...``: the command; the code is in :mod:`model.training.measure_dynamics`."""
import sys

from model.training.measure_dynamics import main

if __name__ == "__main__":
    sys.exit(main())
