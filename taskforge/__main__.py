"""``python -m taskforge``: the same command line as the ``taskforge`` script."""

from taskforge.cli import main

if __name__ == "__main__":
    main()
