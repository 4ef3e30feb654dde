"""dev/sass_spills.py on a synthetic `nvdisasm -g` excerpt: spills are attributed to the source line
marker above them and to their function; other instructions (LDS, LDG, names that merely contain LDL) are not."""
from __future__ import annotations

from dev.sass_spills import main, report, spill_sites

LISTING = """\
\t.text._ZN2mk2vm10megakernelILb0EEEvNS0_7GlobalsE:
        //## File "/repo/csrc/interpreter/ops_matvec.cuh", line 20
        /*0010*/                   STL [R1+0x8], R4 ;
        /*0020*/                   LDS.128 R8, [R2] ;
        //## File "/repo/csrc/interpreter/ops_matvec.cuh", line 53
        /*0030*/                   LDL.64 R6, [R1+0x10] ;
        /*0040*/                   LDL R7, [R1+0x8] ;
        /*0050*/                   LDG.E R9, desc[UR4][R2.64] ;
\t.text._ZN2mk2vm13consume_pagesILi1EEEbv:
        /*0000*/                   STL.64 [R1], R2 ;
        //## File "/repo/csrc/interpreter/state.cuh", line 37
        /*0010*/                   MOV R0, c[0x0][0x210] ;   // an LDLX-free line
"""


def test_spills_are_counted_per_function_line_and_kind() -> None:
    hits = spill_sites(LISTING.splitlines())
    kernel = "_ZN2mk2vm10megakernelILb0EEEvNS0_7GlobalsE"
    assert hits == {
        (kernel, "ops_matvec.cuh:20", "STL"): 1,
        (kernel, "ops_matvec.cuh:53", "LDL"): 2,
        ("_ZN2mk2vm13consume_pagesILi1EEEbv", "?", "STL"): 1,  # before any line marker of its function
    }
    text = report(hits)
    assert "   2 LDL ops_matvec.cuh:53" in text and text.count("\n") == 2


def test_a_clean_listing_says_so(tmp_path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "clean.sass"
    path.write_text("\t.text.k:\n        /*0000*/ LDS R0, [R1] ;\n")
    assert main([str(path)]) == 0
    assert capsys.readouterr().out.strip() == "no local-memory loads or stores"
    assert main([]) == 2
