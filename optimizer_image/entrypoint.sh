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
#   class-archive    make the executor JVM's class archive (run once, at image build)
#   anything else    run as given
set -euo pipefail
shopt -s inherit_errexit # a failure in $(...) stops the script too

# Spark's classes, parsed and verified at image build (`class-archive`): an executor JVM maps them
# instead of loading each from its jar, which is most of its start (floe_optimizer.class_archive).
CLASS_ARCHIVE="${FLOE_CLASS_ARCHIVE:-/opt/floe/spark-classes.jsa}"

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

# Spark's jars, each named and sorted: the class archive is valid only for a class path that starts
# with the one it was made with, and a directory lists its files in an order of its filesystem's
# (the image unpacked on a node is not the filesystem it was built on).
spark_jars() {
    local LC_ALL=C
    local jars=("${SPARK_HOME:?SPARK_HOME is not set}"/jars/*.jar)
    if [[ ! -e "${jars[0]}" ]]; then
        echo "entrypoint.sh: no jars in $SPARK_HOME/jars" >&2
        return 66
    fi
    local IFS=:
    printf '%s' "${jars[*]}"
}

# The executor JVM's class path: Spark's jars (first, for the class archive; the configuration
# directory's files are none of theirs), its configuration directory, extra entries and the working
# directory (SPARK-43540).
spark_classpath() {
    local classpath
    classpath="$(spark_jars)"
    classpath+=":${SPARK_CONF_DIR:-$SPARK_HOME/conf}"
    [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]] && classpath+=":$SPARK_EXTRA_CLASSPATH"
    [[ -n "${SPARK_DIST_CLASSPATH:-}" ]] && classpath+=":$SPARK_DIST_CLASSPATH"
    printf '%s:%s' "$classpath" "$PWD"
}

# What an executor JVM starts with, before Spark's options (which win where they set the same
# flag). floe's tasks do their work in the Python workers; the JVM moves task specs, results and
# the workers' bytes, which the client compiler does well, while the server compiler's threads
# would take a 1-core pod's CPU from its start, which is on a waking group's path to its first
# task: C1 only starts it about a second sooner. Log4j's JMX beans serve a JMX console Spark does
# not use.
EXECUTOR_JAVA_OPTS=(-XX:TieredStopAtLevel=1 -Dlog4j2.disable.jmx=true)

# Spark's Python daemon, started now beside the JVM rather than when the first task comes: the
# driver names floe_optimizer.python_daemon as Spark's daemon module, which hands the JVM's pipes
# over to this one. Its hash seed is the one Spark gives Python workers (it refuses a handover
# from a Spark with another, and Spark then starts its own).
start_python_daemon() {
    local scratch="${SPARK_LOCAL_DIRS:-${TMPDIR:-/tmp}}"
    export FLOE_PYTHON_DAEMON_SOCKET="${scratch%%,*}/floe-python-daemon.sock"
    PYTHONHASHSEED=0 python -m floe_optimizer.python_daemon serve "$FLOE_PYTHON_DAEMON_SOCKET" </dev/null &
}

run_executor() {
    local name java_opts=("${EXECUTOR_JAVA_OPTS[@]}") java="java"
    [[ -r "$CLASS_ARCHIVE" ]] && java_opts+=("-XX:SharedArchiveFile=$CLASS_ARCHIVE")
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
    # The class path first: without Spark's jars the executor cannot start, and a daemon started
    # before that check would outlive the failed start until it saw its parent gone.
    local classpath
    classpath="$(spark_classpath)"
    start_python_daemon
    exec "$java" "${java_opts[@]}" \
        -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
        -cp "$classpath" \
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
    class-archive)
        classpath="$(spark_jars)"
        FLOE_SPARK_JARS="$classpath" exec python -m floe_optimizer.class_archive "$CLASS_ARCHIVE"
        ;;
    "")
        echo "usage: entrypoint.sh executor | driver ARGS... | optimizer ARGS... | class-archive | COMMAND..." >&2
        exit 64
        ;;
    *)
        exec "$@"
        ;;
esac
