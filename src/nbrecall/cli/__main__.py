"""`python -m nbrecall.cli`: the same command line as the `nbrecall` script."""

from nbrecall.cli import main

if __name__ == "__main__":
    main()
