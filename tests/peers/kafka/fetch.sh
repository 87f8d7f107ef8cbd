#!/usr/bin/env bash
# Copy the jars of one real Kafka node (pom.xml beside this file) into a cache outside the
# tree, for tests/peers/kafka_node.py. Idempotent: a stamp file marks a finished copy.
#   KRAFTCORE_KAFKA_CACHE  where the jars go (default ~/.cache/kraftcore/kafka-<version>)
# Prints the cache directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
CACHE="${KRAFTCORE_KAFKA_CACHE:-$HOME/.cache/kraftcore/kafka-$version}"
stamp="$CACHE/.kraftcore-fetched"
# the stamp names the pom it was made from: an edited pom fetches again
want="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$CACHE"
    exit 0
fi
command -v mvn >/dev/null || { echo "fetch.sh: mvn not found" >&2; exit 2; }
mkdir -p "$CACHE"
rm -f "$stamp" "$CACHE"/*.jar
mvn -B -q -f "$here/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$CACHE"
ls "$CACHE"/kafka_2.13-"$version".jar >/dev/null
echo "$want" > "$stamp"
echo "$CACHE"
