"""Make the tests' shared helper modules importable from any working directory."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
