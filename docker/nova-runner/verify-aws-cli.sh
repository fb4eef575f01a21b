#!/bin/sh
# Usage: verify-aws-cli.sh <public-key-file> <fingerprint> <installer.zip> <installer.zip.sig>
#
# Verifies the AWS CLI v2 installer against its detached PGP signature the way the AWS CLI user guide describes
# (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html, "Verifying the integrity of your
# downloaded zip file"), and stricter: the key file must hold exactly one key, the one with the documented
# fingerprint; the signature must be good, made by that key, and the key must not have expired. Anything else exits
# non-zero with the reason, so the image build stops. Run by docker/nova-runner/Dockerfile; tested with real gpg in
# tests/unit/backends/test_nova_runner_image.py.
set -eu

if [ "$#" -ne 4 ]; then
    echo "usage: $0 <public-key-file> <fingerprint> <installer.zip> <installer.zip.sig>" >&2
    exit 2
fi
key_file=$1
fingerprint=$2
installer=$3
signature=$4

fail() {
    echo "AWS CLI installer verification failed: $*" >&2
    exit 1
}

GNUPGHOME="$(mktemp -d)"
export GNUPGHOME
trap 'rm -rf "$GNUPGHOME"' EXIT

gpg --batch --quiet --import "$key_file" || fail "cannot import the key file $key_file"
imported="$(gpg --batch --with-colons --list-keys | awk -F: '$1 == "fpr" { print $10 }' | tr '\n' ' ')"
[ "$imported" = "$fingerprint " ] \
    || fail "$key_file holds [${imported% }], not exactly the documented AWS CLI Team key $fingerprint"

status="$(gpg --batch --status-fd 1 --verify "$signature" "$installer")" \
    || fail "bad or unverifiable signature $signature for $installer"
printf '%s\n' "$status" | grep -Eq '^\[GNUPG:\] GOODSIG ' \
    || fail "the signature is not a good signature from an unexpired key (if the key has expired, check the AWS CLI \
user guide for its current fingerprint and expiry): $(printf '%s' "$status" | tr '\n' ' ')"
printf '%s\n' "$status" | grep -Eq "^\[GNUPG:\] VALIDSIG [0-9A-F]+ .* $fingerprint\$" \
    || fail "the signature was not made by the key $fingerprint"
echo "AWS CLI installer signature verified: $installer, key $fingerprint"
