#!/bin/sh
# openmpi_bundle.sh DEST
#
# Copy this machine's installed OpenMPI runtime (Debian 12: OpenMPI 4.1.4 from
# libopenmpi3 / openmpi-bin / openmpi-common, external PMIx 4.2 from libpmix2,
# hwloc from libhwloc15, libevent) into DEST so that `mpirun` + MPI programs
# linked against libmpi.so.40 run on another x86-64 Linux machine that has no
# OpenMPI installed (single node, shared memory only).
#
# Layout written:
#   DEST/bin/{mpirun,mpiexec,orterun,orted,ompi_info}   (plain copies, no symlinks)
#   DEST/lib/*.so.N                  libmpi, libmpi_cxx, libopen-pal/-rte, libpmix, ...
#   DEST/lib/openmpi3/mca_*.so       OpenMPI MCA components (only self-contained ones)
#   DEST/lib/pmix/pmix_mca_*.so      PMIx MCA components
#   DEST/lib/hwloc/                  empty: keeps hwloc from loading foreign plugins
#   DEST/share/openmpi/help-*.txt    OpenMPI help texts
#   DEST/share/pmix/help-*.txt       PMIx help texts
#   DEST/etc/                        openmpi-mca-params.conf, openmpi-default-hostfile,
#                                    pmix-mca-params.conf
#   DEST/env.sh                      source it: `. DEST/env.sh`
#
# Not copied (assumed present on any glibc Linux): glibc (libc, libm, libdl,
# libpthread, librt, ld-linux), libstdc++, libgcc_s, libz.
# Not copied: components that need UCX, libfabric (ofi), verbs (openib), PSM,
# libnl, OpenSHMEM, monitoring, flux; compiler wrappers; Fortran/Java bindings.
#
# The bundle is relocatable: env.sh finds its own directory when sourced.
set -eu

usage() { echo "usage: $0 DEST" >&2; exit 2; }
[ $# -eq 1 ] || usage
DEST=$1
[ -n "$DEST" ] || usage

die() { echo "openmpi_bundle.sh: error: $*" >&2; exit 1; }
note() { echo "openmpi_bundle.sh: $*" >&2; }

command -v dpkg >/dev/null 2>&1 || die "dpkg not found (expects Debian/Ubuntu with OpenMPI packages)"
command -v ldd  >/dev/null 2>&1 || die "ldd not found"

pkgfiles() {
    # dpkg -L for a package, trying the :amd64 qualified name first.
    dpkg -L "$1:amd64" 2>/dev/null || dpkg -L "$1" 2>/dev/null || die "package $1 is not installed"
}

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/ompibundle.XXXXXX")
trap 'rm -rf "$TMPD"' EXIT INT TERM

pkgfiles libopenmpi3    > "$TMPD/libopenmpi3.list"
pkgfiles openmpi-bin    > "$TMPD/openmpi-bin.list"
pkgfiles openmpi-common > "$TMPD/openmpi-common.list"
pkgfiles libpmix2       > "$TMPD/libpmix2.list"

# --- locate things via the package file lists --------------------------------
OB1=$(grep '/mca_pml_ob1\.so$' "$TMPD/libopenmpi3.list" | head -n 1)
if [ -z "$OB1" ] || [ ! -f "$OB1" ]; then die "mca_pml_ob1.so not found in libopenmpi3"; fi
OMPI_PKGLIBDIR=$(dirname "$OB1")

LIBMPI=$(grep '/libmpi\.so\.40$' "$TMPD/libopenmpi3.list" | head -n 1)
[ -n "$LIBMPI" ] || die "libmpi.so.40 not found in libopenmpi3"
LIBMPI_CXX=$(grep '/libmpi_cxx\.so\.40$' "$TMPD/libopenmpi3.list" | head -n 1 || true)

ORTERUN=$(grep '/bin/orterun$' "$TMPD/openmpi-bin.list" | head -n 1)
ORTED=$(grep '/bin/orted$' "$TMPD/openmpi-bin.list" | head -n 1)
OMPI_INFO=$(grep '/bin/ompi_info$' "$TMPD/openmpi-bin.list" | head -n 1 || true)
if [ -z "$ORTERUN" ] || [ -z "$ORTED" ]; then die "orterun/orted not found in openmpi-bin"; fi

# --- destination --------------------------------------------------------------
if [ -d "$DEST" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ] && [ ! -f "$DEST/env.sh" ]; then
    die "$DEST exists, is not empty and is not a previous bundle; refusing to overwrite"
fi
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd -P)
rm -rf "${DEST:?}/bin" "${DEST:?}/lib" "${DEST:?}/share" "${DEST:?}/etc" "${DEST:?}/env.sh"
mkdir -p "$DEST/bin" "$DEST/lib/openmpi3" "$DEST/lib/pmix" "$DEST/lib/hwloc" \
         "$DEST/share/openmpi" "$DEST/share/pmix" "$DEST/etc"

# Libraries that every target glibc system has: never copied.
is_system_lib() {
    case $1 in
        linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|\
        librt.so.*|libutil.so.*|libresolv.so.*|libstdc++.so.*|libgcc_s.so.*|libz.so.*)
            return 0 ;;
    esac
    return 1
}

# print "soname path" for every resolved dependency of $1; fails on "not found"
deps_of() {
    out=$(LC_ALL=C ldd "$1" 2>/dev/null) || return 1
    if printf '%s\n' "$out" | grep -q 'not found'; then return 1; fi
    printf '%s\n' "$out" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
}

# copy a library (dereferenced) into DEST/lib under its soname
copy_lib() { # soname path
    [ -f "$DEST/lib/$1" ] && return 0
    cp -L "$2" "$DEST/lib/$1"
    chmod 0644 "$DEST/lib/$1"
}

# copy the non-system dependency closure of an ELF file (ldd already gives the
# full transitive closure).
copy_closure() { # elf
    deps_of "$1" > "$TMPD/deps" || die "unresolved dependencies in $1"
    while read -r so path; do
        is_system_lib "$so" && continue
        copy_lib "$so" "$path"
    done < "$TMPD/deps"
}

# --- binaries ------------------------------------------------------------------
cp -L "$ORTERUN" "$DEST/bin/orterun"
cp -L "$ORTERUN" "$DEST/bin/mpirun"     # plain copies: symlinks may not survive transfers
cp -L "$ORTERUN" "$DEST/bin/mpiexec"
cp -L "$ORTED"   "$DEST/bin/orted"
[ -n "$OMPI_INFO" ] && cp -L "$OMPI_INFO" "$DEST/bin/ompi_info"
chmod 0755 "$DEST/bin/"*

# --- core libraries --------------------------------------------------------------
copy_lib libmpi.so.40 "$LIBMPI"
copy_closure "$LIBMPI"
if [ -n "$LIBMPI_CXX" ] && [ -e "$LIBMPI_CXX" ]; then
    copy_lib libmpi_cxx.so.40 "$LIBMPI_CXX"
    copy_closure "$LIBMPI_CXX"
fi
for b in "$ORTERUN" "$ORTED" ${OMPI_INFO:+"$OMPI_INFO"}; do copy_closure "$b"; done

# --- OpenMPI MCA components ----------------------------------------------------------
# Extra libraries a component may pull in besides the core closure.
EXTRA_OK='libmca_common_sm.so.* libmca_common_ompio.so.* libpmix.so.* libmunge.so.*'
is_allowed_dep() { # soname
    is_system_lib "$1" && return 0
    [ -f "$DEST/lib/$1" ] && return 0
    for pat in $EXTRA_OK; do
        # shellcheck disable=SC2254
        case $1 in $pat) return 0 ;; esac
    done
    return 1
}

ncomp=0; nskip=0
grep '/mca_[^/]*\.so$' "$TMPD/libopenmpi3.list" | grep "^$OMPI_PKGLIBDIR/" > "$TMPD/comps"
while read -r comp; do
    name=$(basename "$comp")
    case $name in
        # not needed for single-node shared memory; some need libs we do not ship
        *_monitoring.so|*_flux.so|mca_pml_cm.so|mca_mtl_*|mca_vprotocol_*|\
        mca_atomic_*|mca_memheap_*|mca_scoll_*|mca_spml_*|mca_sshmem_*|\
        mca_btl_openib.so|mca_btl_ofi.so|mca_btl_sm.so|*_ucx.so)
            nskip=$((nskip + 1)); continue ;;
    esac
    ok=1
    if deps_of "$comp" > "$TMPD/cdeps"; then
        while read -r so path; do
            is_allowed_dep "$so" || { ok=0; break; }
        done < "$TMPD/cdeps"
    else
        ok=0
    fi
    if [ $ok -eq 1 ]; then
        cp -L "$comp" "$DEST/lib/openmpi3/$name"
        while read -r so path; do
            is_system_lib "$so" || copy_lib "$so" "$path"
        done < "$TMPD/cdeps"
        ncomp=$((ncomp + 1))
    else
        note "skipping component $name (needs libraries not bundled)"
        nskip=$((nskip + 1))
    fi
done < "$TMPD/comps"
for c in pml_ob1 btl_self btl_vader pmix_ext3x ess_hnp ess_pmi plm_rsh odls_default coll_tuned; do
    [ -f "$DEST/lib/openmpi3/mca_$c.so" ] || die "essential component mca_$c.so was not copied"
done

# --- PMIx components, help files, params ----------------------------------------------------
grep '/pmix_mca_[^/]*\.so$' "$TMPD/libpmix2.list" > "$TMPD/pcomps" || true
while read -r comp; do
    if deps_of "$comp" > "$TMPD/cdeps"; then
        cp -L "$comp" "$DEST/lib/pmix/"
        while read -r so path; do
            is_system_lib "$so" || copy_lib "$so" "$path"
        done < "$TMPD/cdeps"
    else
        note "skipping PMIx component $(basename "$comp") (unresolved deps)"
    fi
done < "$TMPD/pcomps"
grep '/share/pmix/help-[^/]*\.txt$' "$TMPD/libpmix2.list" | while read -r f; do
    cp -L "$f" "$DEST/share/pmix/"
done
{
    echo "# PMIx params for the relocatable OpenMPI bundle (generated by openmpi_bundle.sh)."
    echo "# The component path is set by env.sh (PMIX_MCA_mca_base_component_path)."
    PCONF=$(grep '/pmix-mca-params\.conf$' "$TMPD/libpmix2.list" | head -n 1 || true)
    if [ -n "$PCONF" ] && [ -f "$PCONF" ]; then
        grep -v '^[[:space:]]*#' "$PCONF" | grep -v '^[[:space:]]*$' \
            | grep -v '^[[:space:]]*mca_base_component_path' || true
    fi
} > "$DEST/etc/pmix-mca-params.conf"

# --- OpenMPI help files and config ------------------------------------------------------------
grep '/share/openmpi/help-[^/]*\.txt$' "$TMPD/openmpi-common.list" | while read -r f; do
    cp -L "$f" "$DEST/share/openmpi/"
done
for f in openmpi-mca-params.conf openmpi-default-hostfile; do
    src=$(grep "/$f\$" "$TMPD/openmpi-bin.list" | head -n 1 || true)
    if [ -n "$src" ] && [ -f "$src" ]; then cp -L "$src" "$DEST/etc/$f"; else : > "$DEST/etc/$f"; fi
done
cat >> "$DEST/etc/openmpi-mca-params.conf" <<'EOF'

# --- added by openmpi_bundle.sh: single-node shared-memory bundle ---
# (env.sh also exports these as OMPI_MCA_* which take precedence)
pml = ob1
btl = self,vader
mca_base_component_show_load_errors = 0
EOF

# --- env.sh -------------------------------------------------------------------------------
cat > "$DEST/env.sh" <<'EOF'
# Source this file (". /path/to/bundle/env.sh") to use the relocatable OpenMPI bundle.
# OPENMPI_BUNDLE_ENV_MARKER_7f3a  (used to recognise this file when locating it)
#
# The bundle directory is found from this file's own location. If your shell cannot
# tell (plain POSIX sh/dash without /proc), set OMPI_BUNDLE_DIR=/path/to/bundle first.
_ob_dir=""
if [ -n "${OMPI_BUNDLE_DIR:-}" ] && [ -f "${OMPI_BUNDLE_DIR}/env.sh" ]; then
    _ob_dir=$OMPI_BUNDLE_DIR
elif [ -n "${BASH_SOURCE:-}" ]; then
    _ob_dir=$(dirname -- "$BASH_SOURCE")
elif [ -n "${ZSH_VERSION:-}" ]; then
    eval '_ob_dir=$(dirname -- "${(%):-%x}")'
fi
if [ -z "$_ob_dir" ] && [ -d "/proc/$$/fd" ]; then
    # dash/ash/busybox: the shell keeps the sourced file open; find it.
    for _ob_fd in /proc/$$/fd/*; do
        _ob_f=$(readlink "$_ob_fd" 2>/dev/null) || continue
        case $_ob_f in
            */env.sh)
                if grep -q OPENMPI_BUNDLE_ENV_MARKER_7f3a "$_ob_f" 2>/dev/null; then
                    _ob_dir=$(dirname -- "$_ob_f"); break
                fi ;;
        esac
    done
fi
if [ -z "$_ob_dir" ]; then
    case $0 in */env.sh) _ob_dir=$(dirname -- "$0") ;; esac
fi
if [ -z "$_ob_dir" ] && [ -f ./env.sh ] && grep -q OPENMPI_BUNDLE_ENV_MARKER_7f3a ./env.sh 2>/dev/null; then
    _ob_dir=.
fi
if [ -z "$_ob_dir" ] || [ ! -x "$_ob_dir/bin/orterun" ]; then
    echo "env.sh: cannot locate the OpenMPI bundle; set OMPI_BUNDLE_DIR=/path/to/bundle and source again" >&2
    unset _ob_dir _ob_fd _ob_f
    return 1 2>/dev/null || exit 1
fi
_ob_dir=$(cd "$_ob_dir" && pwd -P)
OMPI_BUNDLE_DIR=$_ob_dir
export OMPI_BUNDLE_DIR

export PATH="$_ob_dir/bin${PATH:+:$PATH}"
export LD_LIBRARY_PATH="$_ob_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# OpenMPI 4 relocation (opal installdirs "env" component)
export OPAL_PREFIX="$_ob_dir"
export OPAL_EXEC_PREFIX="$_ob_dir"
export OPAL_BINDIR="$_ob_dir/bin"
export OPAL_SBINDIR="$_ob_dir/bin"
export OPAL_LIBEXECDIR="$_ob_dir/bin"
export OPAL_LIBDIR="$_ob_dir/lib"
export OPAL_PKGLIBDIR="$_ob_dir/lib/openmpi3"
export OPAL_DATAROOTDIR="$_ob_dir/share"
export OPAL_DATADIR="$_ob_dir/share"
export OPAL_PKGDATADIR="$_ob_dir/share/openmpi"
export OPAL_SYSCONFDIR="$_ob_dir/etc"
export OPAL_INCLUDEDIR="$_ob_dir/include"
export OPAL_PKGINCLUDEDIR="$_ob_dir/include/openmpi"
export OMPI_MCA_mca_base_component_path="$_ob_dir/lib/openmpi3"
export OMPI_MCA_mca_base_param_files="$_ob_dir/etc/openmpi-mca-params.conf"
export OMPI_MCA_orte_default_hostfile="$_ob_dir/etc/openmpi-default-hostfile"

# PMIx (external PMIx 4.2, used by OpenMPI's pmix/ext3x component)
export PMIX_PREFIX="$_ob_dir"
export PMIX_EXEC_PREFIX="$_ob_dir"
export PMIX_LIBDIR="$_ob_dir/lib"
export PMIX_PKGLIBDIR="$_ob_dir/lib/pmix"
export PMIX_DATAROOTDIR="$_ob_dir/share"
export PMIX_DATADIR="$_ob_dir/share"
export PMIX_PKGDATADIR="$_ob_dir/share/pmix"
export PMIX_SYSCONFDIR="$_ob_dir/etc"
export PMIX_MCA_mca_base_component_path="$_ob_dir/lib/pmix"
export PMIX_MCA_mca_base_component_show_load_errors=0

# hwloc: do not pick up the target's (possibly ABI-incompatible) hwloc plugins
export HWLOC_PLUGINS_PATH="$_ob_dir/lib/hwloc"

# single node, shared memory only
export OMPI_MCA_pml=ob1
# Single-node launcher: the default "rsh" launcher aborts mpirun when no ssh/rsh
# binary exists (typical in containers), even for purely local runs.
export OMPI_MCA_plm=isolated
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_MCA_orte_base_help_aggregate=1
# Containers often forbid process_vm_readv (CMA); "none" avoids vader errors there.
# Override before sourcing (e.g. =cma) if the target allows it.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

unset _ob_dir _ob_fd _ob_f
EOF
chmod 0644 "$DEST/env.sh"

note "copied $ncomp OpenMPI components (skipped $nskip)"
note "bundle size: $(du -sh "$DEST" | cut -f1)  ($DEST)"
note "use: . $DEST/env.sh && mpirun -np 2 ./a.out"
