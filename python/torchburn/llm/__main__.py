"""python -m torchburn.llm {chat,generate,benchmark} ... (see torchburn.llm.cli)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
