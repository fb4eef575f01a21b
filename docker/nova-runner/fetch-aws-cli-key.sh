#!/bin/sh
# Usage: fetch-aws-cli-key.sh <fingerprint> <output-file>
#
# Fetches the AWS CLI Team public key by its documented fingerprint for verify-aws-cli.sh. One keyserver being down
# (or serving a copy whose expiry lags the one AWS republishes in the AWS CLI user guide) must not fail every build, so
# each source in AWS_CLI_KEY_SOURCES (space-separated URL templates, %s = the fingerprint) is tried in turn, each with
# curl's retries, and the first answer kept is one that holds exactly the key with that fingerprint, with a user ID,
# unexpired. verify-aws-cli.sh checks the kept file again (exactly that key) and the installer's signature with it.
# Run by docker/nova-runner/Dockerfile; tested with real gpg and curl in tests/unit/backends/test_nova_runner_image.py.
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: $0 <fingerprint> <output-file>" >&2
    exit 2
fi
fingerprint=$1
output=$2
sources=${AWS_CLI_KEY_SOURCES:-"https://keyserver.ubuntu.com/pks/lookup?op=get&options=mr&search=0x%s https://keys.openpgp.org/vks/v1/by-fingerprint/%s https://pgp.mit.edu/pks/lookup?op=get&options=mr&search=0x%s"}
retries=${AWS_CLI_KEY_RETRIES:-4}

GNUPGHOME="$(mktemp -d)"
export GNUPGHOME
candidate="$GNUPGHOME/candidate.asc"
trap 'rm -rf "$GNUPGHOME"' EXIT
now="$(date +%s)"
reasons=""

# Why the candidate file is not the key we want (empty when it is).
problem() {
    listing="$(gpg --batch --with-colons --show-keys "$candidate" 2>/dev/null)" || { echo "not an OpenPGP key"; return; }
    keys="$(printf '%s\n' "$listing" | awk -F: '$1 == "pub"' | wc -l)"
    first_fpr="$(printf '%s\n' "$listing" | awk -F: '$1 == "fpr" { print $10; exit }')"
    expires="$(printf '%s\n' "$listing" | awk -F: '$1 == "pub" { print $7; exit }')"
    if [ "$keys" -ne 1 ] || [ "$first_fpr" != "$fingerprint" ]; then
        echo "holds $keys key(s), first $first_fpr, not exactly $fingerprint"
    elif ! printf '%s\n' "$listing" | grep -q '^uid:'; then
        echo "the key has no user ID (a keyserver that strips unverified identities)"
    elif [ -n "$expires" ] && [ "$expires" -le "$now" ]; then
        echo "the copy expired at $expires (epoch); AWS republishes the key with a new expiry"
    fi
}

set -f  # the sources are split on spaces, never globbed (URLs hold '?')
for template in $sources; do
    # shellcheck disable=SC2059 # the source is a printf template by design (%s = the fingerprint)
    url="$(printf "$template" "$fingerprint")"
    rm -f "$candidate"
    if ! curl -fsSL --retry "$retries" --retry-delay 3 --retry-all-errors --connect-timeout 20 --max-time 60 \
        -o "$candidate" "$url"; then
        reasons="$reasons
  $url: download failed"
        continue
    fi
    why="$(problem)"
    if [ -z "$why" ]; then
        cp "$candidate" "$output"
        echo "AWS CLI Team key $fingerprint fetched from $url"
        exit 0
    fi
    reasons="$reasons
  $url: $why"
done
echo "could not fetch the AWS CLI Team key $fingerprint from any source:$reasons" >&2
exit 1
