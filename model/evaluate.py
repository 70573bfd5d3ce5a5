"""``python -m model.evaluate ...``, kept at its old path; the code is in :mod:`model.training.evaluate`."""
import sys

from model.training.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
