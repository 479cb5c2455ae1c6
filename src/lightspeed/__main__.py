"""`python -m lightspeed`: the `lightspeed` command."""

from lightspeed.cli import main

main()
