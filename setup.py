"""Package metadata for tb-kineto-insights."""

from setuptools import find_packages, setup

setup(
    name="tb-kineto-insights",
    version="0.1.0",
    description=(
        "TensorBoard plugin that reads PyTorch profiler (Kineto) traces and explains "
        "why the GPU job is slow."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=find_packages(include=["tb_kineto_insights", "tb_kineto_insights.*"]),
    package_data={"tb_kineto_insights": ["static/*", "py.typed", "analysis/data/*.json"]},
    install_requires=[
        "tensorboard>=2.21",
        "werkzeug>=2.2",
        "msgspec>=0.18",
        "numpy>=1.23",
        "fsspec>=2023.1",
        "xxhash>=3.0",
        # Filesystem events: a new trace in a local log directory is listed within
        # about a second instead of at the next 30 s rescan (plugin.py, watch.py).
        "watchdog>=3.0",
        # gzip inflate about 1.7x faster than the stdlib's zlib, same API; trace/source.py
        # falls back to zlib when it does not import.
        "zlib-ng>=0.4",
        # RE2, a regex engine without backtracking, for the user's --group-by /
        # /history?group_by= (compare/history_groups.py): linear whatever the pattern.
        "google-re2>=1.1",
    ],
    extras_require={
        "record": ["torch>=2.1"],
        # Object storage: fsspec drivers (``tensorboard --logdir s3://...``).
        "s3": ["s3fs>=2023.1"],
        "gcs": ["gcsfs>=2023.1"],
        "azure": ["adlfs>=2023.1"],
        # `tb-kineto-insights index`: precompute summaries on a Dask cluster.
        "index": ["dask[distributed]>=2023.1"],
        # moto[server]: a real S3-API server on loopback for the object-storage tests.
        "dev": [
            "pytest>=7",
            "ruff>=0.6",
            "mypy>=1.10",
            # the layers of docs/architecture.md, checked by `make lint` (lint-imports)
            "import-linter>=2.1",
            # the test suite in parallel (make test: pytest -n auto)
            "pytest-xdist>=3.5",
            "s3fs>=2023.1",
            "moto[server]>=5",
            "hypothesis>=6",
            "dask[distributed]>=2023.1",
        ],
    },
    entry_points={
        "console_scripts": ["tb-kineto-insights=tb_kineto_insights.cli.main:main"],
        "tensorboard_plugins": [
            "kineto_insights=tb_kineto_insights.serve.plugin_loader:KinetoInsightsLoader",
        ],
    },
)
