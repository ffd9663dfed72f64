"""The performance benchmark (`make bench`, not part of `make test`): see benchmarks/README.md."""
