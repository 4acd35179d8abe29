import os
import sys

# run from a checkout without installing: the package is the folder next to tests/
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
