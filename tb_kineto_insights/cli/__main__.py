"""``python -m tb_kineto_insights.cli``: the console script."""

import sys

from tb_kineto_insights.cli.main import main

sys.exit(main())
