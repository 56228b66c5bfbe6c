"""Reply parsing on the shapes real model replies take."""

from __future__ import annotations

import ast

from cudal1.search.parsing import extract

MODELNEW = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
"""

CPP = """#include <torch/extension.h>
__global__ void relu_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] > 0 ? x[i] : 0;
}
"""


def fenced(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}```\n"


def test_analysis_then_one_python_block():
    reply = "## Performance analysis\nVariant 2 fuses the ReLU.\n\n## Implementation\n" + fenced(MODELNEW)
    ex = extract(reply)
    assert ex.ok and ex.code == MODELNEW and not ex.truncated
    assert ex.analysis == "## Performance analysis\nVariant 2 fuses the ReLU.\n\n## Implementation"


def test_cpp_block_then_python_block_takes_the_python():
    reply = "The kernel:\n" + fenced(CPP, "cpp") + "\nAnd the module:\n" + fenced(MODELNEW, "py")
    ex = extract(reply)
    assert ex.ok and ex.code == MODELNEW
    assert CPP.strip() in ex.analysis  # the analysis is everything before the chosen block


def test_last_of_several_modelnew_blocks_wins():
    draft = MODELNEW.replace("torch.relu", "torch.nn.functional.relu")
    reply = "Draft:\n" + fenced(draft) + "Better, final version:\n" + fenced(MODELNEW) + "That's it."
    assert extract(reply).code == MODELNEW


def test_modelnew_only_in_a_non_last_block():
    usage = "model = ModelNew(16, 8).cuda()\nprint(model(torch.randn(4, 16).cuda()))\n"
    reply = (
        "Here:\n"
        + fenced(MODELNEW)
        + "\nUsage example:\n"
        + fenced(usage)
        + "\n"
        + fenced("pip install ninja\n", "bash")
    )
    ex = extract(reply)
    assert ex.ok and ex.code == MODELNEW


def test_python_tagged_as_cuda_or_untagged_is_accepted():
    for lang in ("cuda", "", "Python", "python3"):
        assert extract("Plan.\n" + fenced(MODELNEW, lang)).code == MODELNEW, lang


def test_no_fences_but_the_reply_is_code():
    assert extract(MODELNEW).code == MODELNEW.strip("\n") + "\n"
    ex = extract("I fused the relu into the linear layer.\n\n" + MODELNEW)
    assert ex.ok and ex.analysis == "I fused the relu into the linear layer."


def test_truncated_reply_ending_inside_the_fence():
    cut = MODELNEW[: MODELNEW.index("return")] + "return torch.relu(self.lin"
    ex = extract("Analysis.\n```python\n" + cut)
    assert ex.truncated and not ex.ok and ex.code is not None
    assert ex.error.startswith("code block is truncated (unterminated fence) and does not parse: line ")


def test_unterminated_fence_that_still_parses_is_usable_but_marked():
    # e.g. a server that stops on "```" strips the closing fence; the caller sees `truncated`
    ex = extract("Analysis.\n```python\n" + MODELNEW)
    assert ex.ok and ex.truncated and ex.code == MODELNEW


def test_think_tags_are_stripped():
    reply = (
        "<think>Maybe I should write class ModelNew(nn.Module) with a kernel...\n```python\nclass ModelNew: pass\n```\n</think>\nAnalysis after thinking.\n"
        + fenced(MODELNEW)
    )
    ex = extract(reply)
    assert ex.ok and ex.code == MODELNEW and ex.analysis == "Analysis after thinking."
    # a template that opens <think> itself: the reply holds only the closing tag
    ex = extract("reasoning without an opening tag</think>\nFinal.\n" + fenced(MODELNEW))
    assert ex.ok and ex.analysis == "Final."


def test_reply_cut_off_while_thinking():
    ex = extract("<think>Let me think about memory coalescing. First, the")
    assert ex.code is None and ex.truncated and "inside <think>" in ex.error


def test_crlf_line_endings():
    reply = ("Analysis.\n" + fenced(MODELNEW)).replace("\n", "\r\n")
    ex = extract(reply)
    assert ex.ok and ex.code == MODELNEW and "\r" not in ex.code


def test_empty_and_codeless_replies():
    assert extract("").error == "empty reply"
    assert extract("   \n").code is None
    ex = extract("I cannot optimise this further; the reference is optimal.")
    assert ex.code is None and ex.error == "no code block defines class ModelNew (reply has no code block)"
    ex = extract("Kernel:\n" + fenced(CPP, "cpp"))
    assert ex.error == "no code block defines class ModelNew (found 1 code block(s): cpp)"


def test_syntax_error_is_reported_with_its_line():
    broken = MODELNEW.replace("def forward(self, x):", "def forward(self, x)")
    ex = extract(fenced(broken))
    assert not ex.ok and not ex.truncated and ex.code == broken
    line = broken.splitlines().index("    def forward(self, x)") + 1
    assert ex.error.startswith(f"code does not parse: line {line}: ")
    assert "def forward(self, x)" in ex.error


def test_fence_inside_a_list_item_is_dedented():
    reply = (
        "1. The code:\n   ```python\n"
        + "".join("   " + ln + "\n" if ln else "\n" for ln in MODELNEW.splitlines())
        + "   ```\n"
    )
    ex = extract(reply)
    assert ex.ok and ast.dump(ast.parse(ex.code)) == ast.dump(ast.parse(MODELNEW))


def test_longer_fence_contains_triple_backticks():
    code = MODELNEW + 'DOC = """\n```\nnot a fence end\n```\n"""\n'
    ex = extract("````python\n" + code + "````\n")
    assert ex.ok and ex.code == code
