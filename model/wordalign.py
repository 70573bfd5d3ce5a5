"""``python -m model.wordalign reference|heads ...``: the word-alignment command, kept at its old path.
The code is in :mod:`model.analysis.alignment.wordalign`."""
import sys

from model.analysis.alignment.wordalign import main

if __name__ == "__main__":
    sys.exit(main())
