"""`python -m benchmarks` (what `make bench` runs): see `benchmarks.run`."""

from benchmarks.run import main

raise SystemExit(main())
