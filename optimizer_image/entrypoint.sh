#!/usr/bin/env bash
# Entrypoint of the floe optimizer image: one image for an OptimizerGroup's Spark driver and for
# its executors.
#
#   executor         what Spark on Kubernetes runs in an executor pod (the pod's args are just
#                    "executor"; everything else comes in SPARK_* variables, as for Spark's own
#                    images): the JVM with KubernetesExecutorBackend
#   driver ARGS...   python -m floe_optimizer.driver ARGS (the operator's driver pods run that
#                    command directly; this is the same thing by name)
#   optimizer ARGS.. floe-optimizer ARGS, the optimizer application outside the operator
#   anything else    run as given
set -euo pipefail

# A UID without a passwd entry (e.g. OpenShift's random ones) makes Hadoop's login in Spark fail;
# nss_wrapper gives it one, as Spark's images do.
fake_passwd_entry() {
    local uid gid wrapper
    uid="$(id -u)"
    gid="$(id -g)"
    getent passwd "$uid" >/dev/null 2>&1 && return 0
    for wrapper in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        if [[ -s "$wrapper" ]]; then
            NSS_WRAPPER_PASSWD="$(mktemp)"
            NSS_WRAPPER_GROUP="$(mktemp)"
            printf 'floe:x:%s:%s:floe optimizer:%s:/bin/false\n' "$uid" "$gid" "${HOME:-/tmp}" >"$NSS_WRAPPER_PASSWD"
            printf 'floe:x:%s:\n' "$gid" >"$NSS_WRAPPER_GROUP"
            export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
            return 0
        fi
    done
}

# The executor JVM's class path: Spark's configuration directory, its jars, extra entries and the
# working directory (SPARK-43540).
spark_classpath() {
    local classpath="${SPARK_CONF_DIR:-${SPARK_HOME:?SPARK_HOME is not set}/conf}"
    classpath+=":${SPARK_HOME:?SPARK_HOME is not set}/jars/*"
    [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]] && classpath+=":$SPARK_EXTRA_CLASSPATH"
    [[ -n "${SPARK_DIST_CLASSPATH:-}" ]] && classpath+=":$SPARK_DIST_CLASSPATH"
    printf '%s:%s' "$classpath" "$PWD"
}

run_executor() {
    local name java_opts=() java="java"
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...: keep
    # their numeric order (the Java module options come first and must stay first).
    while read -r name; do
        [[ -n "$name" ]] && java_opts+=("${!name}")
    done < <(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4,4n)
    [[ -n "${JAVA_HOME:-}" ]] && java="$JAVA_HOME/bin/java"
    local required
    for required in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
        SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP; do
        if [[ -z "${!required:-}" ]]; then
            echo "entrypoint.sh: executor: $required is not set (Spark sets it in the executor pods it creates)" >&2
            exit 64
        fi
    done
    fake_passwd_entry
    exec "$java" "${java_opts[@]}" \
        -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
        -cp "$(spark_classpath)" \
        org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
        --driver-url "$SPARK_DRIVER_URL" \
        --executor-id "$SPARK_EXECUTOR_ID" \
        --cores "$SPARK_EXECUTOR_CORES" \
        --app-id "$SPARK_APPLICATION_ID" \
        --hostname "$SPARK_EXECUTOR_POD_IP" \
        --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
        --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
}

case "${1:-}" in
    executor)
        run_executor
        ;;
    driver)
        shift
        fake_passwd_entry
        exec python -m floe_optimizer.driver "$@"
        ;;
    optimizer)
        shift
        fake_passwd_entry
        exec floe-optimizer "$@"
        ;;
    "")
        echo "usage: entrypoint.sh executor | driver ARGS... | optimizer ARGS... | COMMAND..." >&2
        exit 64
        ;;
    *)
        exec "$@"
        ;;
esac
