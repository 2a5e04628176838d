"""Credentials out of what leaves for a model: the redaction itself, the LLM context as the endpoint receives it,
and the MCP tools' results."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from nbformat import v4

from conftest import HashEmbedder, code, stream, write_nb
from nbrecall.answer.answer import answer
from nbrecall.answer.redact import redact_all, redact_secrets
from nbrecall.config import Settings
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.mcp_server import for_model
from nbrecall.service import Archive
from test_llm import FakeLLM

AWS = "AKIAIOSFODNN7EXAMPLE"
DB_PASSWORD = "s3cr3tPW"
GITHUB = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAxyzSECRETBODY\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(("line", "secret", "kind"), [
    (f'aws_key = "{AWS}"', AWS, "AWS Access Key"),
    (f'engine = create_engine("postgresql://bob:{DB_PASSWORD}@db.local/prod")', DB_PASSWORD, "Basic Auth Credentials"),
    (f'token = "{GITHUB}"', GITHUB, "GitHub Token"),
    ('password = "hunter2xyz"', "hunter2xyz", "Secret Keyword"),
    (f"key = '''{PEM}'''", "SECRETBODY", "Private Key"),
])
def test_each_credential_is_replaced_whole(line: str, secret: str, kind: str) -> None:
    done = redact_secrets(f"x = 1\n{line}\nprint(x)")
    assert secret not in done.text and f"[secret removed: {kind}]" in done.text
    assert done.kinds == [kind] and done.text.startswith("x = 1\n") and done.text.endswith("\nprint(x)")


def test_what_only_looks_random_is_left_alone() -> None:
    """Hashes, ids, numbers, base64 data and prose about passwords are what notebooks print as data."""
    text = ("total_ballast = 3803.0\nsha = '9f3d894b5e499feeac73d6444eb9222029b38c158ad7868bf261d0816e5e78fe'\n"
            "commit 4d7a214614ab2935c943f9e0ff69d22eadbb8f32\nhost = '203.0.113.7'\n"
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==\n"
            "The password policy requires 12 characters.\nPASSWORD = os.environ['DB_PASSWORD']\n"
            "The DNA sequence is CACACCAGACAAAATTTGGTTAATTTGCGCCCAATATTCATTACTTTGACC")  # `ACCA` + 16: an AWS key form
    done = redact_secrets(text)
    assert done.text == text and done.kinds == []


def test_nested_results_are_redacted_in_every_string() -> None:
    cleaned, kinds = redact_all({"results": [{"snippet": f'aws = "{AWS}"', "cell": 3}], "query": "aws"})
    assert cleaned == {"results": [{"snippet": 'aws = "[secret removed: AWS Access Key]"', "cell": 3}],
                       "query": "aws"}
    assert kinds == ["AWS Access Key"]
    settings = Settings()
    shown = for_model({"source": f'aws = "{AWS}"'}, settings)
    assert AWS not in str(shown) and shown["secrets_removed"] == 1
    settings.answer.redact_secrets = False
    assert for_model({"source": f'aws = "{AWS}"'}, settings) == {"source": f'aws = "{AWS}"'}


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    base = tmp_path_factory.mktemp("redact")
    write_nb(base / "share" / "bucket_sync.ipynb", [
        v4.new_markdown_cell("# Bucket sync\nCopies the survey archive to the bucket every night."),
        code(f'aws_key = "{AWS}"\nengine = create_engine("postgresql://bob:{DB_PASSWORD}@db.local/prod")\n'
             "rows = sync_survey_archive(engine)\nprint('survey rows copied:', rows)", 1,
             [stream("survey rows copied: 4711\n")]),
    ])
    settings = Settings(index_dir=base / "idx")
    embedder = HashEmbedder()
    run_index([base / "share"], settings, embedder, LanceStore(base / "idx" / "lance", embedder.dim))
    return Archive(settings, _embedder=embedder)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM()
    yield server
    server.close()


def test_the_llm_context_holds_no_credential_and_the_answer_says_so(archive: Archive, fake: FakeLLM,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBRECALL_LLM_API_KEY", raising=False)
    settings = copy.deepcopy(archive.settings)
    settings.answer.base_url, settings.answer.model = fake.base_url, "fake-model"
    fake.script = [("stream", ["4711 rows [bucket_sync.ipynb › Cell 1]"], 0.0)]
    done = answer("how many survey rows were copied to the bucket", archive, settings)
    sent = fake.requests[-1]["body"]["messages"][1]["content"]
    assert "survey rows copied: 4711" in sent  # the answer's evidence still goes
    assert AWS not in sent and DB_PASSWORD not in sent
    assert "[secret removed: AWS Access Key]" in sent and "[secret removed: Basic Auth Credentials]" in sent
    assert done.mode == "llm" and "2 credential(s) in the notebooks were removed" in (done.notice or "")
    settings.answer.redact_secrets = False
    answer("how many survey rows were copied to the bucket", archive, settings)
    assert AWS in fake.requests[-1]["body"]["messages"][1]["content"]


def test_an_archive_without_credentials_sends_its_context_unchanged(tmp_path: Path) -> None:
    text = "# Notebook: a.ipynb\n## Cell [1] · type:code\nx = np.linspace(0, 10, 100)\nprint(x.mean())\n5.0"
    assert redact_secrets(text).text is text
