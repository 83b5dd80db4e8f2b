#!/usr/bin/env bash
# console/vendor.sh: vendor the console's third-party assets from npm at pinned
# versions into console/static/vendor/, and record in console/vendor.lock each
# package's npm integrity (the sha512 of its tarball, as the registry publishes it)
# and each vendored file's sha256 (TestVendored checks the files against it).
# Needs npm, node, tar and sha256sum; run it to change a version, then commit the
# files and vendor.lock together. The console never needs Node to build or run.
set -euo pipefail
cd "$(dirname "$0")"

# Each package: its name, its pinned version, and the files taken from its
# tarball (path in the tarball:path under static/vendor/).
packages=(
	"@xterm/xterm 6.0.0 package/lib/xterm.mjs:xterm/xterm.mjs package/css/xterm.css:xterm/xterm.css package/LICENSE:xterm/LICENSE"
	"@xterm/addon-fit 0.11.0 package/lib/addon-fit.mjs:xterm/addon-fit.mjs package/LICENSE:xterm/addon-fit.LICENSE"
	"asciinema-player 3.18.0 package/dist/bundle/asciinema-player.min.js:asciinema-player/asciinema-player.min.js package/dist/bundle/asciinema-player.css:asciinema-player/asciinema-player.css package/LICENSE:asciinema-player/LICENSE"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lock=$tmp/vendor.lock
{
	echo "# The console's vendored third-party assets (console/vendor.sh writes this file)."
	echo "# package NAME VERSION NPM-INTEGRITY"
	echo "# file PATH-UNDER-static/vendor SHA256 PATH-IN-THE-TARBALL"
} >"$lock"

rm -rf static/vendor
mkdir -p static/vendor
for spec in "${packages[@]}"; do
	read -r -a words <<<"$spec"
	name=${words[0]}
	version=${words[1]}
	want=$(npm view "$name@$version" dist.integrity)
	[[ $want == sha512-* ]] || { echo "vendor.sh: $name@$version: no sha512 integrity from the registry" >&2; exit 1; }
	dir=$tmp/$(printf '%s' "$name" | tr '@/' '__')
	mkdir -p "$dir"
	npm pack --silent --pack-destination "$dir" "$name@$version" >/dev/null
	tarball=$(find "$dir" -maxdepth 1 -name '*.tgz' -print -quit)
	got=sha512-$(node -e 'const c=require("crypto"),fs=require("fs");process.stdout.write(c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$tarball")
	[[ $got == "$want" ]] || { echo "vendor.sh: $name@$version: tarball is $got, the registry says $want" >&2; exit 1; }
	echo "package $name $version $got" >>"$lock"
	tar -xzf "$tarball" -C "$dir"
	for pair in "${words[@]:2}"; do
		from=${pair%%:*}
		to=${pair#*:}
		mkdir -p "static/vendor/$(dirname "$to")"
		cp "$dir/$from" "static/vendor/$to"
		sum=$(sha256sum "static/vendor/$to")
		echo "file $to ${sum%% *} $from" >>"$lock"
	done
done
cp "$lock" vendor.lock
echo "vendor.sh: vendored ${#packages[@]} packages into console/static/vendor (see console/vendor.lock)"
