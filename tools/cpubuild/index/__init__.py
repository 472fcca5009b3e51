"""A PEP 503 / 658 / 691 / 700 package index keyed by commit: publishing
(publish.py), storage backends (storage.py, s3.py), page rendering
(pages.py), reading an index (client.py) and serving one (server.py)."""
