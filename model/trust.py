"""``python -m model.trust ...``: the command; the code is in :mod:`model.training.measure_trust`."""
import sys

from model.training.measure_trust import main

if __name__ == "__main__":
    sys.exit(main())
