"""``python -m model.prepare ...``, kept at its old path; the code is in :mod:`model.training.prepare`."""
import sys

from model.training.prepare import main

if __name__ == "__main__":
    sys.exit(main())
