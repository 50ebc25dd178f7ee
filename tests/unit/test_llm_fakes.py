"""The shared validate/repair path (infra.llm.jsonfix) through the test fakes (infra.llm.fakes)."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from infra.errors import LLMOutputError, LLMTimeout, LLMUnavailable, ScriptExhausted
from infra.llm.base import LLM, ChatMessage
from infra.llm.fakes import FunctionLLM, Raw, ScriptedLLM
from infra.llm.jsonfix import Completion, InvalidOutput, extract_json, parse_structured, strip_thinking
from tests.loopback_ollama import install_real_llm_guard


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    install_real_llm_guard(monkeypatch)


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: Literal["answers", "interesting", "unrelated"]
    motive: str = Field(max_length=40)


class Needs(BaseModel):
    requirements: list[str] = Field(min_length=1, max_length=3)


ASK: list[ChatMessage] = [{"role": "system", "content": "You judge passages."},
                          {"role": "user", "content": "Does this passage answer it?"}]
GOOD = {"tag": "answers", "motive": "It states the figure."}


def run(coro):
    return asyncio.run(coro)


# -- jsonfix ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', '{"a": 1}'),
    ('<think>\nhmm {"no": 1}\n</think>\n{"a": 1}', '{"a": 1}'),
    ('```json\n{"a": 1}\n```', '{"a": 1}'),
    ('Sure! Here it is: {"a": [1, 2]} Hope that helps.', '{"a": [1, 2]}'),
    ('{"a": 1}\n\n\n\n', '{"a": 1}'),
])
def test_extract_json_finds_the_first_complete_value(text: str, expected: str) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize("text, problem", [
    ("", "empty"),
    ("   \n", "empty"),
    ("<think>only thinking</think>", "empty"),
    ("<think>never closed {\"a\": 1}", "empty"),
    ("no json here", "not_json"),
    ('{"a": [1, 2', "not_json"),
])
def test_extract_json_reports_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(InvalidOutput) as info:
        extract_json(text)
    assert info.value.problem == problem


def test_strip_thinking_removes_every_block() -> None:
    assert strip_thinking("<think>a</think>x<THINK>b</THINK>y") == "xy"


def test_parse_structured_accepts_a_complete_answer_even_at_the_token_limit() -> None:
    padded = Completion('{"tag": "answers", "motive": "ok"}' + "\n" * 50, finish_reason="length")
    assert parse_structured(padded, Verdict) == Verdict(tag="answers", motive="ok")


def test_parse_structured_calls_a_cut_off_answer_truncated() -> None:
    with pytest.raises(InvalidOutput) as info:
        parse_structured(Completion('{"tag": "answers", "motive": "It st', "length"), Verdict)
    assert info.value.problem == "truncated"


def test_parse_structured_reports_schema_errors_by_field() -> None:
    with pytest.raises(InvalidOutput) as info:
        parse_structured(Completion('{"tag": "maybe", "motive": "' + "x" * 60 + '"}'), Verdict)
    assert info.value.problem == "schema"
    assert "tag:" in info.value.detail and "motive:" in info.value.detail


# -- ScriptedLLM ----------------------------------------------------------------------------------------

def test_fakes_satisfy_the_llm_port() -> None:
    assert isinstance(ScriptedLLM([]), LLM)
    assert isinstance(FunctionLLM(lambda m, s: GOOD), LLM)


@pytest.mark.parametrize("item", [
    Verdict(**GOOD),
    GOOD,
    '{"tag": "answers", "motive": "It states the figure."}',
    Raw('{"tag": "answers", "motive": "It states the figure."}'),
])
def test_scripted_answers_of_every_form_validate(item: object) -> None:
    llm = ScriptedLLM([item])
    assert run(llm.structured(ASK, Verdict)) == Verdict(**GOOD)
    assert llm.calls == 1
    [logged] = llm.calls_log
    assert logged.schema == "Verdict"
    assert logged.messages == ASK
    assert logged.json_schema == Verdict.model_json_schema()
    llm.assert_exhausted()


def test_invalid_json_is_retried_with_the_error_shown_to_the_model() -> None:
    llm = ScriptedLLM(['{"tag": "answers", motive}', GOOD])
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert llm.calls == 2
    retry = llm.calls_log[1].messages
    assert retry[:2] == ASK
    assert retry[2] == {"role": "assistant", "content": '{"tag": "answers", motive}'}
    assert retry[3]["role"] == "user" and "not valid JSON" in retry[3]["content"]


def test_schema_violation_feedback_names_the_field() -> None:
    llm = ScriptedLLM([{"tag": "maybe", "motive": "x"}, GOOD])
    run(llm.structured(ASK, Verdict))
    feedback = llm.calls_log[1].last_user_message
    assert "Verdict" in feedback and "tag" in feedback and "'maybe'" in feedback


def test_truncated_answer_is_retried_with_a_bigger_budget_and_without_echo() -> None:
    llm = ScriptedLLM([Raw('{"tag": "answers", "motive": "It st', "length"), GOOD], max_tokens=100)
    run(llm.structured(ASK, Verdict))
    first, second = llm.calls_log
    assert (first.max_tokens, second.max_tokens) == (100, 200)
    assert [m["role"] for m in second.messages] == ["system", "user", "user"]
    assert "cut off" in second.last_user_message


def test_budget_growth_stops_at_the_ceiling() -> None:
    cut = Raw('{"tag": "ans', "length")
    llm = ScriptedLLM([cut, cut, cut, cut], max_tokens=100, max_retries=3)
    with pytest.raises(LLMOutputError):
        run(llm.structured(ASK, Verdict))
    assert [c.max_tokens for c in llm.calls_log] == [100, 200, 400, 400]


def test_empty_and_thinking_answers() -> None:
    llm = ScriptedLLM(["", "<think>The passage gives 42 %.</think>\n" + '{"tag": "answers", "motive": "42 %"}'])
    assert run(llm.structured(ASK, Verdict)).motive == "42 %"
    assert "empty" in llm.calls_log[1].last_user_message


def test_output_error_after_max_retries_carries_the_last_problem() -> None:
    llm = ScriptedLLM([{"tag": "maybe", "motive": "x"}] * 3, max_retries=2)
    with pytest.raises(LLMOutputError) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is True
    assert "Verdict" in str(info.value) and "3 attempt" in str(info.value) and "tag" in str(info.value)
    assert llm.calls == 3


def test_no_retries_means_one_attempt() -> None:
    llm = ScriptedLLM(["nope", GOOD], max_retries=0)
    with pytest.raises(LLMOutputError):
        run(llm.structured(ASK, Verdict))
    assert llm.calls == 1 and llm.remaining == 1


def test_scripted_exception_is_raised_and_counted() -> None:
    llm = ScriptedLLM([LLMTimeout("the model took too long"), GOOD])
    with pytest.raises(LLMTimeout):
        run(llm.structured(ASK, Verdict))
    assert llm.calls == 1
    assert "LLMTimeout" in (llm.calls_log[0].error or "")
    assert run(llm.structured(ASK, Verdict)).tag == "answers"


def test_exhausted_script_fails_the_test_clearly() -> None:
    llm = ScriptedLLM([GOOD])
    run(llm.structured(ASK, Verdict))
    with pytest.raises(ScriptExhausted, match=r"ran out.*Verdict"):
        run(llm.structured(ASK, Verdict))
    assert issubclass(ScriptExhausted, AssertionError)


def test_answer_of_the_wrong_schema_is_a_test_bug() -> None:
    llm = ScriptedLLM([Needs(requirements=["a"])])
    with pytest.raises(AssertionError, match="asked for Verdict but its answer is a Needs"):
        run(llm.structured(ASK, Verdict))


def test_per_schema_queues_serve_concurrent_steps_in_any_order() -> None:
    llm = ScriptedLLM({Verdict: [GOOD, {"tag": "unrelated", "motive": "off topic"}],
                       "Needs": [{"requirements": ["capacity fade"]}]})

    async def main() -> tuple[Verdict, Needs, Verdict]:
        return await asyncio.gather(llm.structured(ASK, Verdict), llm.structured(ASK, Needs),
                                    llm.structured(ASK, Verdict))

    first, needs, second = run(main())
    assert {first.tag, second.tag} == {"answers", "unrelated"}
    assert needs.requirements == ["capacity fade"]
    assert sorted(llm.schemas_asked()) == ["Needs", "Verdict", "Verdict"]
    with pytest.raises(ScriptExhausted, match="no scripted answer left for Needs"):
        run(llm.structured(ASK, Needs))


def test_push_extends_the_script() -> None:
    llm = ScriptedLLM({Verdict: []})
    llm.push(GOOD, schema=Verdict)
    assert llm.remaining == 1
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    with pytest.raises(TypeError):
        llm.push(GOOD)


def test_assert_exhausted_flags_unused_answers() -> None:
    llm = ScriptedLLM([GOOD, GOOD])
    run(llm.structured(ASK, Verdict))
    with pytest.raises(AssertionError, match="1 scripted answer"):
        llm.assert_exhausted()


def test_check_reports_a_scripted_outage() -> None:
    run(ScriptedLLM([]).check())
    with pytest.raises(LLMUnavailable, match="start it"):
        run(ScriptedLLM([], unavailable="Ollama is not reachable: start it").check())


# -- FunctionLLM -------------------------------------------------------------------------------------------

def test_function_llm_computes_answers_from_the_prompt() -> None:
    def judge(messages: list[ChatMessage], schema: type[BaseModel]) -> dict:
        assert schema is Verdict
        text = messages[-1]["content"]
        return {"tag": "answers" if "42" in text else "unrelated", "motive": "looked for 42"}

    llm = FunctionLLM(judge)
    yes = run(llm.structured([{"role": "user", "content": "It is 42."}], Verdict))
    no = run(llm.structured([{"role": "user", "content": "No number."}], Verdict))
    assert (yes.tag, no.tag, llm.calls) == ("answers", "unrelated", 2)


def test_function_llm_may_be_async_and_goes_through_repair() -> None:
    seen: list[int] = []

    async def answer(messages: list[ChatMessage], schema: type[BaseModel]) -> str:
        seen.append(len(messages))
        return "garbage" if len(seen) == 1 else '{"requirements": ["a", "b"]}'

    llm = FunctionLLM(answer)
    assert run(llm.structured(ASK, Needs)).requirements == ["a", "b"]
    assert seen == [2, 4]  # the retry carries the bad answer and the correction


def test_function_llm_errors_propagate() -> None:
    def boom(messages: list[ChatMessage], schema: type[BaseModel]) -> dict:
        raise LLMUnavailable("no model")

    llm = FunctionLLM(boom)
    with pytest.raises(LLMUnavailable):
        run(llm.structured(ASK, Verdict))
    assert llm.calls == 1 and "no model" in (llm.calls_log[0].error or "")


def test_scripted_llm_survives_pickling_with_its_script() -> None:
    import pickle

    llm = ScriptedLLM({Verdict: [GOOD]})
    clone = pickle.loads(pickle.dumps(llm))
    assert run(clone.structured(ASK, Verdict)).tag == "answers"
    assert (clone.calls, llm.calls, llm.remaining) == (1, 0, 1)
