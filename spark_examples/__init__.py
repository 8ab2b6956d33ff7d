"""PySpark pipelines on Spark's built-in Kafka source and sink, run against kbroker.

Each module is one command (``python -m spark_examples.<name> --help``); the tests in
compat_tests/test_spark_*.py import them and run them on one SparkSession.
"""
