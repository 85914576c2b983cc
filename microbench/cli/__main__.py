"""``python -m microbench.cli``: the gpubench command."""

from microbench.cli.app import main

if __name__ == "__main__":
    main()
