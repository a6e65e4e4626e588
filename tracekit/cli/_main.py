"""``python -m tracekit.cli._main``: the console script, runnable without the installed entry point."""

from tracekit.cli import main

if __name__ == "__main__":
    main()
