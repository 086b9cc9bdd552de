#!/bin/bash
# The image's entrypoint (under tini). Three ways in:
#
#   driver ARGS...   Spark on Kubernetes (the Spark operator) starting the driver pod: spark-submit
#                    in client mode inside the pod, ARGS as Spark's Kubernetes backend passes them
#                    (--properties-file, --class, local:///opt/lakefs-gc/batch/run.py, arguments).
#   executor         Spark on Kubernetes starting an executor pod: the executor backend, configured
#                    through the SPARK_EXECUTOR_* / SPARK_DRIVER_URL / SPARK_JAVA_OPT_<n> variables
#                    the backend sets on the pod.
#   anything else    run as given, e.g. `lakefs-gc serve --config /etc/lakefs-gc/gc.yaml`.
#
# A pip-installed PySpark has Spark's jars and scripts but not the entrypoint of Spark's own
# images, so the image carries this one; SPARK_HOME is the installed pyspark package.
set -euo pipefail

spark_classpath() {
  local cp="${SPARK_HOME}/jars/*"
  if [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]]; then cp="${cp}:${SPARK_EXTRA_CLASSPATH}"; fi
  if [[ -n "${SPARK_CONF_DIR:-}" ]]; then cp="${SPARK_CONF_DIR}:${cp}"; fi
  if [[ -n "${HADOOP_CONF_DIR:-}" ]]; then cp="${HADOOP_CONF_DIR}:${cp}"; fi
  printf '%s' "${cp}"
}

# SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in numeric order (the executor's JVM options)
executor_java_options() {
  local name
  while IFS= read -r name; do
    JAVA_OPTS+=("${!name}")
  done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n)
}

case "${1:-}" in
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    JAVA_OPTS=()
    executor_java_options
    exec java "${JAVA_OPTS[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "$(spark_classpath):${SPARK_DIST_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  "")
    exec lakefs-gc --help
    ;;
  *)
    exec "$@"
    ;;
esac
