# One image for every deltaplane service: Airflow (api-server, scheduler, dag-processor,
# triggerer) and the Spark master and worker, so the driver, the executors and Airflow's tasks
# run the same wheel. Java 17 for Spark; the pyspark wheel carries Spark itself.
FROM python:3.11.10-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    DELTAPLANE_HOME=/opt/deltaplane \
    AIRFLOW_HOME=/opt/airflow

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/deltaplane
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY operators ./operators
COPY spark_jobs ./spark_jobs
COPY devstack ./devstack
COPY setup.py ./
RUN pip install ".[airflow,spark,quality]" "psycopg2-binary==2.9.10"
COPY dags ./dags
COPY config ./config

# Spark's scripts (spark-class, spark-submit) live inside the pyspark package.
RUN ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
ENV SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

RUN useradd --create-home --uid 50000 deltaplane && mkdir -p /opt/airflow && chown -R deltaplane /opt/airflow
USER deltaplane
