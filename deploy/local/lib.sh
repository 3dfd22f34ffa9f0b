# Shared set-up for deploy/local/demo, deploy/local/test and .ci/run (sourced, not run).
#
# Functions:
#   sagacity_system_packages  install Java 17, Maven, PostgreSQL and curl with apt-get when absent;
#                             with --browser also Chromium and its driver (the console's
#                             browser tests; the demo does not need them)
#   sagacity_cargo_path       put the cargo rustup installed ($HOME/.cargo/bin) on the PATH when
#                             no cargo is on it
#   sagacity_venv             create .venv and install the project with its dev extras (its
#                             compiled hot path, native/, built in where cargo is)
#   sagacity_install          the one package install (editable); where the compiled module
#                             could not be built, the cause is remembered, not fatal
#   sagacity_native_check     after a failed build: one warning and SAGACITY_NATIVE=0 exported
#                             (the Python path), or an error when SAGACITY_NATIVE=1 asks for it
#                             (and in CI: CI=true without SAGACITY_NATIVE asks for it too)
#   sagacity_stack_up         bring the checkout's stack up and export its variables
#   sagacity_stack_down       stop the services sagacity_stack_up started (none else)

SAGACITY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SAGACITY_VENV="$SAGACITY_ROOT/.venv"
_SAGACITY_STARTED=()

_say() { printf '%s\n' "$*" >&2; }

_have_postgres_server() {
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null \
        || { [ -n "${SAGACITY_PG_BIN:-}" ] && [ -x "$SAGACITY_PG_BIN/initdb" ]; }
}

sagacity_system_packages() {
    local missing=()
    if [ "${1:-}" = "--browser" ]; then
        [ -x /usr/bin/chromium ] || missing+=(chromium)
        [ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
    fi
    command -v java >/dev/null || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] \
        || missing+=(openjdk-17-jre-headless)
    command -v mvn >/dev/null || missing+=(maven)
    _have_postgres_server || missing+=(postgresql)
    command -v python3 >/dev/null || missing+=(python3)
    command -v curl >/dev/null || missing+=(curl)  # the walkthrough (docs/production.md) uses it
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        _say "missing: ${missing[*]}"
        _say "install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}) and run again"
        return 1
    fi
    apt-get update -qq
    # Java 17 where the distribution has it; otherwise its default Java (any >= 17 runs Kafka 4).
    if [[ " ${missing[*]} " == *" openjdk-17-jre-headless "* ]] \
        && ! apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then
        missing=("${missing[@]/openjdk-17-jre-headless/default-jre-headless}")
    fi
    _say "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    # Debian's postgresql package starts a cluster of its own on 5432; the stack runs its own
    # server on a free port, so the packaged one is not needed (left as the package set it up).
}

# What .venv must hold: the inputs' hash and whether native/ is built ($1: 1 or 0). Every
# native/src/**/*.rs, its modules' directories too (native/src/grammar/, native/src/verify/).
_sagacity_want() {
    printf '%s-native%s\n' "$({
        cat "$SAGACITY_ROOT/pyproject.toml" "$SAGACITY_ROOT/setup.py" "$SAGACITY_ROOT"/native/Cargo.*
        find "$SAGACITY_ROOT/native/src" -name '*.rs' -print0 | LC_ALL=C sort -z | xargs -0 cat
    } | sha256sum | cut -d' ' -f1)" "$1"
}

sagacity_cargo_path() {
    if [ -x "$HOME/.cargo/bin/cargo" ] && ! command -v cargo >/dev/null; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
}

sagacity_venv() {
    local stamp="$SAGACITY_VENV/.sagacity-installed"
    local want native=0
    # The compiled hot path (native/, Rust; docs/adr/0013-compiled-hot-path.md) is built into
    # the package where cargo is, unless SAGACITY_NATIVE=0; without it the same code runs in
    # Python.
    sagacity_cargo_path
    if [ "${SAGACITY_NATIVE:-1}" != 0 ] && command -v cargo >/dev/null; then native=1; fi
    want="$(_sagacity_want "$native")"
    # A build that failed runs the Python path: what SAGACITY_NATIVE=0 (which the failure
    # exports to the scripts run next, .ci/run's deploy/local/test) asks for. No reinstall.
    if [ "$native" = 0 ] && [ -f "$SAGACITY_VENV/.sagacity-native-failed" ] \
        && [ "$(cat "$stamp" 2>/dev/null)" = "$(_sagacity_want 1)" ]; then
        want="$(_sagacity_want 1)"
    fi
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        _say "sagacity needs Python >= 3.11; python3 is $(python3 --version 2>&1)"
        return 1
    fi
    if [ ! -x "$SAGACITY_VENV/bin/python" ]; then
        _say "creating $SAGACITY_VENV"
        if ! python3 -m venv "$SAGACITY_VENV" 2>/dev/null; then
            # Debian's python3 creates venvs only with python3-venv installed.
            rm -rf "$SAGACITY_VENV"
            if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
                _say "installing python3-venv with apt-get"
                apt-get update -qq
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
                python3 -m venv "$SAGACITY_VENV"
            else
                _say "python3 cannot create a virtual environment; install python3-venv"
                return 1
            fi
        fi
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        "$SAGACITY_VENV/bin/python" -m pip install -q --upgrade pip
        sagacity_install "$native" || return 1
        if [ "$native" = 0 ]; then
            _say "no cargo (or SAGACITY_NATIVE=0): the journal's hot path runs in Python"
        fi
        printf '%s\n' "$want" >"$stamp"
    fi
    sagacity_native_check
}

# The compiled module is part of the package (setup.py builds it with setuptools-rust) and
# optional (docs/adr/0013-compiled-hot-path.md): where cargo is on the PATH but cannot build
# (rustup without a default toolchain, an old compiler, no network for crates) the package
# installs without it and the Python path runs. The failure is remembered in .venv until the
# inputs change, so later runs neither retry nor fail; each run says it once
# (sagacity_native_check). $1: 0 to install without building it (no cargo, SAGACITY_NATIVE=0).
# The lines of pip's output that say what it is doing (a package collected, the install), on
# stderr; never fails the pipeline it ends.
_sagacity_pip_progress() {
    grep -E --line-buffered '^(Collecting|Installing collected|Successfully installed)' >&2 || true
}

sagacity_install() {
    local failed="$SAGACITY_VENV/.sagacity-native-failed" log="$SAGACITY_VENV/install.log"
    local build=("SAGACITY_NATIVE=")
    [ "${1:-1}" = 0 ] && build=("SAGACITY_NATIVE=0")
    rm -f "$failed"
    # No module of an earlier build survives to be imported: the editable install builds it
    # into the source tree, and releases before it shipped it as its own distribution.
    rm -f "$SAGACITY_ROOT"/sagacity/_sagacity_native*.so
    "$SAGACITY_VENV/bin/python" -m pip uninstall -q -y sagacity-native >/dev/null 2>&1 || true
    if [ "${1:-1}" = 0 ]; then
        _say "installing sagacity and its dev dependencies into .venv"
    else
        _say "installing sagacity and its dev dependencies into .venv, with its compiled hot" \
            "path (native/, Rust)"
    fi
    # Verbose into the log (the build's one warning line, setup.py, names a failure's cause);
    # what pip collects and installs shown as it goes: a cold install takes minutes.
    if ! (cd "$SAGACITY_ROOT" && env "${build[@]}" "$SAGACITY_VENV/bin/python" -m pip install -v \
        --progress-bar off -e '.[dev]' 2>&1 | tee "$log" | _sagacity_pip_progress); then
        tail -n 30 "$log" >&2
        _say "error: installing sagacity failed (log: $log)"
        return 1
    fi
    if [ "${1:-1}" = 0 ] || "$SAGACITY_VENV/bin/python" -c 'import sagacity._sagacity_native' \
        >/dev/null 2>&1; then
        return 0
    fi
    sed -nE 's/.*is not built: (.*); sagacity runs its Python paths.*/\1/p' "$log" | head -n1 \
        | cut -c1-300 >"$failed" || true
}

sagacity_native_check() {
    local failed="$SAGACITY_VENV/.sagacity-native-failed"
    [ -f "$failed" ] || return 0
    local cause
    cause="$(cat "$failed")"
    # A failed build is only attempted where cargo is. In CI (CI=true) that is an error, as
    # SAGACITY_NATIVE=1 makes it: a CI run never checks the Python half alone by accident;
    # SAGACITY_NATIVE=0 says so deliberately.
    if [ "${SAGACITY_NATIVE:-}" = 1 ] || { [ "${CI:-}" = true ] && [ -z "${SAGACITY_NATIVE:-}" ]; }
    then
        _say "error: cargo could not build the compiled hot path (native/): ${cause:-see the log}"
        _say "  SAGACITY_NATIVE=1 (or CI=true) requires it. Log: $SAGACITY_VENV/install.log;" \
            "to retry after fixing cargo: rm $SAGACITY_VENV/.sagacity-installed"
        return 1
    fi
    _say "warning: cargo could not build the compiled hot path (native/): ${cause:-see the log};" \
        "sagacity runs in Python (correct, slower: verify about 0.23x of its ceiling instead" \
        "of 0.63x, ingest 0.50x instead of 0.89x). Log: $SAGACITY_VENV/install.log; to retry" \
        "after fixing cargo: rm $SAGACITY_VENV/.sagacity-installed"
    export SAGACITY_NATIVE=0
}

sagacity_stack_up() {
    local before exports
    before="$("$SAGACITY_VENV/bin/sagacity" dev status 2>/dev/null || true)"
    exports="$(cd "$SAGACITY_ROOT" && "$SAGACITY_VENV/bin/sagacity" dev up)"
    eval "$exports"
    grep -q '^kafka .*running' <<<"$before" || _SAGACITY_STARTED+=(kafka)
    grep -q '^postgres .*running' <<<"$before" || _SAGACITY_STARTED+=(postgres)
}

sagacity_stack_down() {
    [ ${#_SAGACITY_STARTED[@]} -eq 0 ] && return 0
    local flags=(--no-kafka --no-postgres) name
    for name in "${_SAGACITY_STARTED[@]}"; do
        flags=("${flags[@]/--no-$name/--$name}")
    done
    (cd "$SAGACITY_ROOT" && "$SAGACITY_VENV/bin/sagacity" dev down "${flags[@]}") || true
    _SAGACITY_STARTED=()
}
