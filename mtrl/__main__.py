"""`python -m mtrl` runs the mtrl command."""

from mtrl.cli import main

main()
