"""``python -m model.card ...``, kept at its old path; the code is in :mod:`model.training.card`."""
import sys

from model.training.card import main

if __name__ == "__main__":
    sys.exit(main())
