"""Layer 6, Airflow: the DAG factory, task factories, the supervised stream operator. Runs in Airflow's
processes only; starts Spark jobs through spark-submit and never imports pyspark at parse time."""
