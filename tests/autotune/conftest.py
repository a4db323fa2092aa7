import os
import sys

# templates of these tests live in modules here; build workers import them by name
sys.path.insert(0, os.path.dirname(__file__))
