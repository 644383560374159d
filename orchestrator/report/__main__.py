"""`python -m distillery.orchestrator.report`: the same as `distillery report`."""

import sys

from distillery.orchestrator.report.cli import main

sys.exit(main())
