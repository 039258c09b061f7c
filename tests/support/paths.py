"""Where the repository and the shared fixtures are, from any test module."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_FIXTURES = os.path.join(REPO, "..", "shared", "fixtures")
