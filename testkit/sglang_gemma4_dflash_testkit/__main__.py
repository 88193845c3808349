import sys

from sglang_gemma4_dflash_testkit.main_job import main

sys.exit(main())
