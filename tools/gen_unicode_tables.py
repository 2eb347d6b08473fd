#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_tables.c: the Unicode data the tokenizer needs, from Python's
`unicodedata` (or a drop-in module with the same API, such as `unicodedata2`).

Tables (all two-stage lookups over 128-code-point blocks, deduplicated):
  * class flags per code point: letter (\\p{L}), number (\\p{N}), white space (the `\\s` of the
    Oniguruma / Rust-regex engines HF tokenizers uses == Unicode White_Space), regex word char
    (Rust regex `\\w`, used by added tokens' single_word), decimal digit, and "NFC-inert" (the code
    point can never change under NFC: ccc 0, NFC_QC=Yes, never the second half of a composition);
  * canonical combining class;
  * canonical and compatibility full decompositions (Hangul syllables are algorithmic in C);
  * canonical composition pairs (primary composites only).

Why two sources: HF `tokenizers` matches \\p{L}/\\p{N} with Oniguruma's tables (Unicode 16.0 in
tokenizers 0.23) but normalizes with the unicode-normalization-alignments crate, whose data is
Unicode 9.0. The category data follows the regex engine (--categories-module); the normalization data
is Python's `unicodedata` minus the code points assigned after Unicode 9.0 that have a combining class
or a decomposition (NEWER_THAN_UNICODE_9 below, derived once from the Unicode 9.0 UCD). Because
combining classes and decompositions are frozen by Unicode's stability policy, that reproduces the
9.0 normalization exactly. Usage:

    pip install --target /tmp/ud2 unicodedata2==16.0.0
    PYTHONPATH=/tmp/ud2 python3 tools/gen_unicode_tables.py --categories-module unicodedata2

The versions used are recorded in the generated file (tb_unicode_category_version,
tb_unicode_normalization_version).
"""
import argparse
import importlib
import os
import sys
import unicodedata

MAX_CP = 0x110000
BLOCK = 128

FLAG_LETTER = 1
FLAG_NUMBER = 2
FLAG_SPACE = 4
FLAG_WORD = 8
FLAG_DIGIT = 16
FLAG_NFC_INERT = 32

# Unicode White_Space (PropList.txt). Oniguruma's \s and Rust's char::is_whitespace / regex \s are
# exactly this set (checked against tokenizers: U+0085, U+00A0, U+2028, U+3000 are \s; U+001C,
# U+200B, U+180E, U+FEFF are not).
WHITE_SPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
WHITE_SPACE |= set(range(0x2000, 0x200B))

# Other_Alphabetic code points whose general category is So (circled / squared / negative Latin
# letters); the rest of Other_Alphabetic is in categories M*/L*/Nl, which \w covers anyway.
OTHER_ALPHABETIC_SO = set(range(0x24B6, 0x24EA)) | set(range(0x1F130, 0x1F14A)) | set(range(0x1F150, 0x1F16A)) | set(
    range(0x1F170, 0x1F18A))


# Code points assigned in Unicode 10.0-14.0 with a nonzero combining class or a decomposition. The
# normalizer of HF tokenizers (Unicode 9.0 data) leaves them alone: ccc 0, no decomposition, never
# composed. Complete up to Unicode 14.0; a newer `unicodedata` needs this list extended.
NEWER_THAN_UNICODE_9 = [
    (0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08D3), (0x09FE, 0x09FE), (0x0C3C, 0x0C3C), (0x0D3B, 0x0D3C),
    (0x0EBA, 0x0EBA), (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA), (0x32FF, 0x32FF), (0xA7F2, 0xA7F4),
    (0xA82C, 0xA82C), (0xAB69, 0xAB69), (0x10781, 0x10785), (0x10787, 0x107B0), (0x107B2, 0x107BA),
    (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50), (0x10F82, 0x10F85), (0x11070, 0x11070),
    (0x1133B, 0x1133B), (0x1145E, 0x1145E), (0x11839, 0x1183A), (0x11938, 0x11938), (0x1193D, 0x1193E),
    (0x11943, 0x11943), (0x119E0, 0x119E0), (0x11A34, 0x11A34), (0x11A47, 0x11A47), (0x11A99, 0x11A99),
    (0x11D42, 0x11D42), (0x11D44, 0x11D45), (0x11D97, 0x11D97), (0x16FF0, 0x16FF1), (0x1E130, 0x1E136),
    (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1F16C, 0x1F16C), (0x1FBF0, 0x1FBF9),
]
NORMALIZATION_VERSION = "9.0.0"


def two_stage(values, ctype, name, out):
    """Emits stage1 (block -> block index) and stage2 (deduplicated blocks) arrays."""
    blocks = {}
    stage1 = []
    stage2 = []
    for start in range(0, MAX_CP, BLOCK):
        block = tuple(values[start:start + BLOCK])
        if block not in blocks:
            blocks[block] = len(blocks)
            stage2.extend(block)
        stage1.append(blocks[block])
    s1type = "uint16_t"
    if len(blocks) > 65535:
        sys.exit(f"{name}: too many distinct blocks")
    out.append(f"const {s1type} {name}_stage1[{len(stage1)}] = {{")
    out.extend(wrap(stage1))
    out.append("};")
    out.append(f"const {ctype} {name}_stage2[{len(stage2)}] = {{")
    out.extend(wrap(stage2))
    out.append("};")


def wrap(numbers, per_line=24):
    lines = []
    for i in range(0, len(numbers), per_line):
        lines.append("    " + ",".join(str(n) for n in numbers[i:i + per_line]) + ",")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--categories-module", default="unicodedata",
                        help="module giving general categories (default: the standard unicodedata)")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "..", "src", "tokenizer",
                                                         "unicode_tables.c"))
    args = parser.parse_args()
    cats = importlib.import_module(args.categories_module)
    norm = unicodedata
    if norm.unidata_version != "14.0.0":
        sys.exit(f"Python's unicodedata is {norm.unidata_version}; NEWER_THAN_UNICODE_9 is complete for 14.0.0 "
                 "only: extend it from the Unicode 9.0 UCD first")
    excluded = set()
    for lo, hi in NEWER_THAN_UNICODE_9:
        excluded.update(range(lo, hi + 1))

    def decomposition(cp):
        return "" if cp in excluded else norm.decomposition(chr(cp))

    flags = [0] * MAX_CP
    ccc = [0] * MAX_CP
    for cp in range(MAX_CP):
        ch = chr(cp)
        cat = cats.category(ch)
        f = 0
        if cat.startswith("L"):
            f |= FLAG_LETTER
        if cat.startswith("N"):
            f |= FLAG_NUMBER
        if cat == "Nd":
            f |= FLAG_DIGIT
        if cp in WHITE_SPACE:
            f |= FLAG_SPACE
        # Rust regex \w = Alphabetic | M | Nd | Pc | Join_Control (approximating Alphabetic as
        # L | Nl | the So part of Other_Alphabetic).
        if cat[0] in "LM" or cat in ("Nd", "Nl", "Pc") or cp in (0x200C, 0x200D) or cp in OTHER_ALPHABETIC_SO:
            f |= FLAG_WORD
        flags[cp] = f
        if not (0xD800 <= cp < 0xE000) and cp not in excluded:
            ccc[cp] = norm.combining(ch)

    # Canonical / compatibility full decompositions (recursive, as the normal forms give them).
    decomp_entries = []  # (cp, kind, sequence) kind 0 canonical, 1 compat-only
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp <= 0xD7A3:
            continue
        ch = chr(cp)
        raw = decomposition(cp)
        if not raw:
            continue
        nfd = norm.normalize("NFD", ch)
        nfkd = norm.normalize("NFKD", ch)
        if nfd != ch:
            decomp_entries.append((cp, nfd, nfkd))
        elif nfkd != ch:
            decomp_entries.append((cp, None, nfkd))

    # Composition pairs: every canonical decomposition of length 2 whose composite survives NFC
    # (that excludes singletons, non-starter decompositions and the composition exclusions).
    compose = {}
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp <= 0xD7A3:
            continue
        raw = decomposition(cp)
        if not raw or raw.startswith("<"):
            continue
        parts = [int(p, 16) for p in raw.split()]
        if len(parts) == 2 and norm.normalize("NFC", chr(cp)) == chr(cp):
            compose[(parts[0], parts[1])] = cp
    seconds = {b for (_, b) in compose} | set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        if cp in excluded or (ccc[cp] == 0 and norm.normalize("NFC", ch) == ch and cp not in seconds):
            flags[cp] |= FLAG_NFC_INERT

    out = []
    out.append("/* Unicode data for the tokenizer (character classes, combining classes, decompositions,")
    out.append(" * compositions). GENERATED by tools/gen_unicode_tables.py; do not edit. */")
    out.append('#include "tokenizer/unicode.h"')
    out.append("")
    out.append(f'const char tb_unicode_category_version[] = "{cats.unidata_version}";')
    out.append(f'const char tb_unicode_normalization_version[] = "{NORMALIZATION_VERSION}";')
    out.append("")
    two_stage(flags, "uint8_t", "tb_uc_flags", out)
    two_stage(ccc, "uint8_t", "tb_uc_ccc", out)

    # Decomposition index: code point -> entry number (1-based, 0 = none) via a two-stage table.
    pool = []
    entry_lines = []
    index = [0] * MAX_CP
    for number, (cp, nfd, nfkd) in enumerate(decomp_entries, start=1):
        canon_off = canon_len = 0
        if nfd is not None:
            canon_off, canon_len = len(pool), len(nfd)
            pool.extend(ord(c) for c in nfd)
        compat_off, compat_len = len(pool), len(nfkd)
        pool.extend(ord(c) for c in nfkd)
        entry_lines.append(f"    {{{canon_off},{canon_len},{compat_off},{compat_len}}},")
        index[cp] = number
    if len(decomp_entries) >= 65535 or len(pool) >= 65535:
        sys.exit("decomposition tables outgrew uint16 indices")
    two_stage(index, "uint16_t", "tb_uc_decomp_index", out)
    out.append(f"const tb_uc_decomposition tb_uc_decompositions[{len(decomp_entries) + 1}] = {{")
    out.append("    {0,0,0,0},")
    out.extend(entry_lines)
    out.append("};")
    out.append(f"const uint32_t tb_uc_decomp_pool[{len(pool)}] = {{")
    out.extend(wrap(pool, 12))
    out.append("};")

    pairs = sorted(((a << 21) | b, c) for (a, b), c in compose.items())
    out.append(f"const size_t tb_uc_composition_count = {len(pairs)};")
    out.append(f"const uint64_t tb_uc_composition_keys[{len(pairs)}] = {{")
    out.extend(wrap([k for k, _ in pairs], 8))
    out.append("};")
    out.append(f"const uint32_t tb_uc_composition_values[{len(pairs)}] = {{")
    out.extend(wrap([v for _, v in pairs], 12))
    out.append("};")
    out.append("")
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out))
    print(f"wrote {args.output}: categories {cats.unidata_version}, normalization {NORMALIZATION_VERSION} (from {norm.unidata_version}), "
          f"{len(decomp_entries)} decompositions, {len(pairs)} compositions")


if __name__ == "__main__":
    main()
