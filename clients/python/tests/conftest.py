"""Tests run against the package source (``src/``), installed or not."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

# The repository's schemas, relative to this package: clients/python/../../docs/schemas.
SCHEMAS = HERE.parent.parent.parent / "docs" / "schemas"
os.environ.setdefault("NPCMEM_TEST_SCHEMAS", str(SCHEMAS))
# Messages as clients send and read them, kept by the repository's wire tests.
FIXTURES = HERE.parent.parent.parent / "tests" / "wire" / "fixtures"
os.environ.setdefault("NPCMEM_TEST_FIXTURES", str(FIXTURES))
