#!/usr/bin/env python3
"""Tests for check_module_cycles.py on small crates written to a temp dir.

Run: python3 scripts/test_check_module_cycles.py
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_module_cycles.py")


def run(files: dict[str, str], *args: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as repo:
        for path, text in files.items():
            full = os.path.join(repo, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))
        done = subprocess.run(
            [sys.executable, SCRIPT, "--repo", repo, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout.replace(repo + os.sep, "")


class Cycles(unittest.TestCase):
    def test_a_top_level_cycle_through_a_grouped_use_and_a_reexport(self):
        code, out = run(
            {
                "crates/k/src/lib.rs": """
                    pub mod a;
                    pub mod b;
                    pub mod c;
                    pub use c::Thing;
                """,
                "crates/k/src/a.rs": "use crate::{b::B, c as _};\n",
                "crates/k/src/b.rs": "pub struct B(crate::Thing);\n",
                "crates/k/src/c.rs": "pub struct Thing;\nfn f() { let _ = crate::a::g; }\n",
            }
        )
        self.assertEqual(code, 1, out)
        self.assertIn("k: import cycle among the submodules of the crate root: {a, b, c}", out)
        self.assertIn("  cycle: a -> b -> c -> a\n", out)
        self.assertIn("    b -> c: crates/k/src/b.rs:1 (crate::Thing)\n", out)
        self.assertIn("    c -> a: crates/k/src/c.rs:2 (crate::a::g)\n", out)

    def test_siblings_in_a_folder_module_through_super(self):
        code, out = run(
            {
                "crates/k/src/lib.rs": "mod folder;\n",
                "crates/k/src/folder/mod.rs": "mod x;\nmod y;\npub use x::X;\nfn own() {}\n",
                "crates/k/src/folder/x.rs": "use super::y::Y;\nfn f() { super::own() }\n",
                "crates/k/src/folder/y.rs": "pub struct Y(super::X);\n",
            }
        )
        self.assertEqual(code, 1, out)
        self.assertIn("k: import cycle among the submodules of the module folder: {x, y}", out)
        self.assertIn("  cycle: x -> y -> x\n", out)
        self.assertNotIn("crate root", out)

    def test_comments_strings_parents_and_test_modules_make_no_edges(self):
        files = {
            "crates/k/src/lib.rs": "pub mod a;\npub mod b;\npub fn root() {}\n",
            "crates/k/src/a.rs": "pub fn a() { crate::b::b(); crate::root(); }\n",
            "crates/k/src/b.rs": """
                // crate::a::a() in a comment
                /* crate::a::a() /* nested */ crate::a::a() */
                pub fn b() { let _ = "crate::a::a()"; let _ = r#"crate::a::a"#; let _ = '"'; }
                #[cfg(test)]
                mod tests {
                    use crate::a::a;
                }
            """,
        }
        code, out = run(files)
        self.assertEqual((code, out), (0, "no import cycles\n"))
        code, out = run(files, "--tests")
        self.assertEqual(code, 1, out)
        self.assertIn("    b -> a: crates/k/src/b.rs:7 (crate::a::a)\n", out)

    def test_an_unknown_crate_is_a_usage_error(self):
        code, _ = run({"crates/k/src/lib.rs": ""}, "nope")
        self.assertEqual(code, 2)


if __name__ == "__main__":
    unittest.main()
