"""``python -m model.train ...``, kept at its old path; the code is in :mod:`model.training.train`."""
import sys

from model.training.train import main

if __name__ == "__main__":
    sys.exit(main())
