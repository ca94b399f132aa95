"""`streamtable.testing`: test a pipeline in this process, as Kafka Streams' `TopologyTestDriver` tests a topology.

    def test_totals(streamtable_driver):
        driver = streamtable_driver("my_totals", pipelines=Path(__file__).parent)
        driver.pipe("my_totals_events", [{"key": "a", "amount": 2, "event_time": "2026-01-01T00:00:00Z"}])
        driver.run()
        assert driver.output("my_totals") == [{"key": "a", "amount": 2}]

`PipelineDriver` runs the very code `streamtable run` runs (ingest's validation and quarantine, the micro-batch,
its commits and gate) on a throw-away lake, on one SparkSession kept for the whole test session: the first test
pays the JVM's start, each later run a second or two (settings for tiny batches around each run, the gates' suites
checked in memory without Data Docs; docs/benchmarks.md, "The test driver"). The pytest fixtures
`streamtable_driver` and `streamtable_spark` come with the package (the `streamtable[testing]` extra brings pytest).
"""

from streamtable.testing.driver import PipelineDriver

__all__ = ["PipelineDriver"]
