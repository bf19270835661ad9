"""The README test makes a clone, a fresh venv and installs from PyPI (minutes): ``nox -s readme`` runs it
(with ``TG_README_TEST=1``); a plain ``pytest tests`` leaves it out."""
import os

collect_ignore = [] if os.environ.get("TG_README_TEST") == "1" else ["test_readme.py"]
