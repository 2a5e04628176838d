"""The SQL of nbrecall's PostgreSQL schema: the manifest's migrations and the chunk store's (`store_migrations`),
with the tokenizer that mirrors LanceDB's keyword index. `pg_db.PgDatabase.migrate` runs the steps a database
has not had yet, in order (a schema's version is its number of steps run)."""

from __future__ import annotations

MANIFEST_MIGRATIONS: list[str] = [
    # 1: the tables of the SQLite manifest, with meta as jsonb
    """
    CREATE TABLE IF NOT EXISTS files (
        root text NOT NULL, rel text NOT NULL, size bigint NOT NULL, mtime_ns bigint NOT NULL,
        sha256 text NOT NULL, seen_at double precision NOT NULL, PRIMARY KEY (root, rel));
    CREATE INDEX IF NOT EXISTS files_sha ON files (sha256);
    CREATE INDEX IF NOT EXISTS files_rel ON files (rel);
    CREATE TABLE IF NOT EXISTS contents (
        sha256 text PRIMARY KEY, status text NOT NULL, reason text NOT NULL DEFAULT '',
        root text NOT NULL, rel text NOT NULL, n_cells integer NOT NULL DEFAULT 0,
        n_chunks integer NOT NULL DEFAULT 0, n_embedded integer NOT NULL DEFAULT 0,
        meta jsonb NOT NULL DEFAULT '{}', indexed_at double precision NOT NULL);
    CREATE TABLE IF NOT EXISTS cells (
        sha256 text NOT NULL, idx integer NOT NULL, cell_id text NOT NULL, cell_type text NOT NULL,
        execution_count integer, source text NOT NULL, outputs text NOT NULL, PRIMARY KEY (sha256, idx));
    CREATE TABLE IF NOT EXISTS runs (
        id bigserial PRIMARY KEY, started_at double precision NOT NULL, finished_at double precision,
        summary jsonb NOT NULL DEFAULT '{}');
    CREATE TABLE IF NOT EXISTS pending_vectors (
        chunk_id text PRIMARY KEY, sha256 text NOT NULL, priority double precision NOT NULL, text text NOT NULL);
    CREATE INDEX IF NOT EXISTS pending_priority ON pending_vectors (priority DESC, chunk_id COLLATE "C");
    CREATE INDEX IF NOT EXISTS pending_sha ON pending_vectors (sha256);
    """,
    # 2: value facts (one row per fact, its fields as JSON: only the answerer reads them, a notebook at a time)
    """
    CREATE TABLE IF NOT EXISTS facts (
        sha256 text NOT NULL, seq integer NOT NULL, idx integer NOT NULL, data jsonb NOT NULL,
        PRIMARY KEY (sha256, seq));
    """,
    # 3: notebook families (`ingest.families`, `index.family_store`): MinHash signatures, their LSH bands, each
    # content's family, the settings they were made with
    """
    CREATE TABLE IF NOT EXISTS family_sigs (
        sha256 text PRIMARY KEY, size integer NOT NULL, sig bytea NOT NULL, pending smallint NOT NULL DEFAULT 1,
        banded smallint NOT NULL DEFAULT 0);
    CREATE INDEX IF NOT EXISTS family_sigs_pending ON family_sigs (pending) WHERE pending = 1;
    CREATE INDEX IF NOT EXISTS family_sigs_unbanded ON family_sigs (banded) WHERE banded = 0;
    CREATE TABLE IF NOT EXISTS family_bands (
        band integer NOT NULL, key bigint NOT NULL, sha256 text NOT NULL, PRIMARY KEY (band, key, sha256));
    CREATE TABLE IF NOT EXISTS families (sha256 text PRIMARY KEY, family text NOT NULL);
    CREATE INDEX IF NOT EXISTS families_family ON families (family);
    CREATE TABLE IF NOT EXISTS family_state (name text PRIMARY KEY, value text NOT NULL);
    """,
]


# The English stop words of LanceDB's keyword index: NLTK's list (PostgreSQL's english.stop and then the pieces of
# contractions, "y", "ll", "won", "doesn", ...; forms with an apostrophe left out, no token has one). Found word by
# word against lancedb 0.40: the 127 of english.stop alone left "y" and "ll" counted, 4-8% of some chunks' length.
# A mirror of `index.terms.STOP_WORDS`, spelled out here because it is part of migration 2's SQL text (changing
# it would change the migration); tests/test_keyword_terms.py checks the two lists hold the same words.
_STOP_LIST = (
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers "
    "herself it its itself they them their theirs themselves what which who whom this that these those am is are "
    "was were be been being have has had having do does did doing a an the and but if or because as until while "
    "of at by for with about against between into through during before after above below to from up down in out "
    "on off over under again further then once here there when where why how all any both each few more most "
    "other some such no nor not only own same so than too very s t can will just don should now d ll m o re ve y "
    "ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn"
)
STOP_WORDS = _STOP_LIST.split()

# Migration 2: `chunk_tsv` tokenizes as LanceDB's index does (lance-index `InvertedIndexParams::build`): split on
# every character that is not a letter or digit, drop tokens of 40+ characters, lower-case, stem (Snowball
# English) every token, numbers and letter-digit words too, *then* drop the stems that are stop words, fold
# accents. PostgreSQL's `english` configuration, used before, drops stop words before stemming (so "why", "does",
# "only", "very", "any", "before" vanished, which LanceDB keeps as "whi", "doe", "onli", ...; and "others",
# "owned" stayed, which LanceDB drops as "other", "own"), leaves numbers and letter-digit words unstemmed, splits
# at ² or ₂ and keeps accents. Here punctuation becomes space (else the parser keeps `pd.read_csv` as one host-like
# token no query word matches) and the parser splits at every other non-alphanumeric character (replacing
# `[^[:alnum:]]+` instead made the function 3x slower); folding runs first, so `x²` and `log₂` become the tokens
# `x2` and `log2`, as in LanceDB. A tsvector keeps at most 255 positions of a lexeme and none past 16,383, so in a
# chunk that reaches either limit (a long table of numbers) every token is counted (`chunk_term_counts`): `ntok`
# exact, and the true frequency of each capped lexeme in `tf_extra` (NULL elsewhere); three such chunks on
# shared/eval had lost 2,000-7,000 tokens, 0.7% of the mean length. `max_tf`, the highest term frequency of the
# chunk, bounds its BM25 score without reading its tsvector (`PgStore.keyword`). Existing rows are tokenized
# again, with their document frequencies; the HNSW index is dropped first (every row gets a new version: building
# it again, which `finish_run` does, is cheaper than inserting each into it).
_RETOKENIZE = """\
    DROP INDEX IF EXISTS chunks_vector;
    UPDATE chunks SET text = text;
    DELETE FROM term_stats;
    INSERT INTO term_stats (lexeme, ndoc)
        SELECT word, ndoc FROM ts_stat('SELECT tsv FROM chunks WHERE tsv IS NOT NULL');
    UPDATE text_stats
        SET n_docs = (SELECT count(*) FROM chunks), avg_len = (SELECT coalesce(avg(ntok), 0) FROM chunks);
"""  # what a tokenizer step ends with: every row tokenized again, the text statistics counted again
_TOKENIZER_STEP = (r"""
    DO $$
    DECLARE
        here oid := (SELECT oid FROM pg_namespace WHERE nspname = current_schema());
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_ts_dict WHERE dictname = 'nbrecall_stem' AND dictnamespace = here) THEN
            CREATE TEXT SEARCH DICTIONARY nbrecall_stem (TEMPLATE = snowball, Language = english);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = 'nbrecall_english' AND cfgnamespace = here) THEN
            CREATE TEXT SEARCH CONFIGURATION nbrecall_english (PARSER = pg_catalog."default");
            EXECUTE 'ALTER TEXT SEARCH CONFIGURATION nbrecall_english ADD MAPPING FOR '
                || (SELECT string_agg(alias, ', ') FROM ts_token_type('pg_catalog.default') WHERE alias <> 'blank')
                || ' WITH nbrecall_stem';
        END IF;
    END $$;
    CREATE OR REPLACE FUNCTION ascii_fold(body text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    BEGIN ATOMIC
        SELECT CASE WHEN octet_length(body) = length(body) OR getdatabaseencoding() <> 'UTF8' THEN body
            ELSE replace(replace(replace(replace(replace(replace(translate(
                regexp_replace(normalize(body, NFKD), '[\u0300-\u036f]+', '', 'g'),
                'øØđĐłŁıħĦðÐ', 'oOdDlLihHdD'), 'ß', 'ss'), 'æ', 'ae'), 'Æ', 'AE'), 'œ', 'oe'), 'Œ', 'OE'), 'þ', 'th')
        END;
    END;
    CREATE OR REPLACE FUNCTION chunk_words(body text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    BEGIN ATOMIC
        SELECT regexp_replace(regexp_replace(ascii_fold(left(body, 500000)), '[[:alnum:]]{40,}', ' ', 'g'),
                              '[[:punct:]]+', ' ', 'g');
    END;
    CREATE OR REPLACE FUNCTION chunk_tsv(body text) RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE
    BEGIN ATOMIC
        SELECT ts_delete(to_tsvector('nbrecall_english'::regconfig, chunk_words(body)), @STOP@::text[]);
    END;
    CREATE OR REPLACE FUNCTION chunk_term_counts(body text) RETURNS TABLE (lexeme text, n integer)
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
    BEGIN ATOMIC
        SELECT l.lexeme, count(*)::integer
        FROM ts_debug('nbrecall_english'::regconfig, chunk_words(body)) AS d, unnest(d.lexemes) AS l(lexeme)
        WHERE NOT l.lexeme = ANY (@STOP@::text[])
        GROUP BY l.lexeme;
    END;
    ALTER TABLE chunks ADD COLUMN IF NOT EXISTS tf_extra jsonb;
    ALTER TABLE chunks ADD COLUMN IF NOT EXISTS max_tf integer NOT NULL DEFAULT 0;
    CREATE OR REPLACE FUNCTION chunks_fill_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.tsv := chunk_tsv(NEW.text);
        NEW.tf_extra := NULL;
        SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0),
               coalesce(max(coalesce(array_length(positions, 1), 1)), 0)
        INTO NEW.ntok, NEW.max_tf FROM unnest(NEW.tsv);
        IF EXISTS (SELECT 1 FROM unnest(NEW.tsv) AS t
                   WHERE array_length(t.positions, 1) >= 255 OR t.positions[array_length(t.positions, 1)] >= 16383)
        THEN
            SELECT jsonb_object_agg(c.lexeme, c.n) FILTER (WHERE c.n > coalesce(array_length(t.positions, 1), 1)),
                   coalesce(sum(c.n), 0), coalesce(max(c.n), 0)
            INTO NEW.tf_extra, NEW.ntok, NEW.max_tf
            FROM chunk_term_counts(NEW.text) AS c LEFT JOIN unnest(NEW.tsv) AS t ON t.lexeme = c.lexeme;
        END IF;
        RETURN NEW;
    END $$;
""" + _RETOKENIZE).replace("@STOP@", "'{" + ",".join(STOP_WORDS) + "}'")


# Migration 3: folding recomposes what it did not strip (NFC after NFKD minus the Latin combining marks), as
# LanceDB's folding only maps characters that have an ASCII form: `で` (て + U+3099) and Hangul syllables (jamo)
# stay whole instead of being cut at a voicing mark, which changed their token counts and so every BM25 score
# (the notebooks' CJK words became findable with index/terms.py). Existing rows are tokenized again.
_RECOMPOSE_STEP = r"""
    CREATE OR REPLACE FUNCTION ascii_fold(body text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    BEGIN ATOMIC
        SELECT CASE WHEN octet_length(body) = length(body) OR getdatabaseencoding() <> 'UTF8' THEN body
            ELSE normalize(replace(replace(replace(replace(replace(replace(translate(
                regexp_replace(normalize(body, NFKD), '[\u0300-\u036f]+', '', 'g'),
                'øØđĐłŁıħĦðÐ', 'oOdDlLihHdD'), 'ß', 'ss'), 'æ', 'ae'), 'Æ', 'AE'), 'œ', 'oe'), 'Œ', 'OE'), 'þ', 'th'),
                NFC)
        END;
    END;
""" + _RETOKENIZE


def store_migrations(dim: int) -> list[str]:
    """The chunk table with a pgvector column of `dim`, an HNSW index (cosine) and a full-text index.

    `tsv` and `ntok` (token count, the BM25 document length) are filled by a trigger, so the text is parsed once.
    `chunk_tsv` tokenizes like LanceDB's full-text index (migration 2, `_TOKENIZER_STEP`), so the BM25 scores of
    the two stores agree: on shared/eval (30k chunks, 60 queries) the keyword top-10 differed on 40 queries with
    PostgreSQL's `english` configuration and no query term frequency, and afterwards only in the order of exactly
    tied chunks (copies of a notebook; LanceDB orders ties arbitrarily), scores equal to float32 precision.
    Measured on shared/eval: keeping `how`, `where`, `do`, `we`... (a 33-word stop list) cost nb@1 0.917 → 0.883.
    Vectors are stored inline (`PLAIN`): out-of-line (TOAST) vectors made an exact scan 4x slower (measured: 130
    vs 33 ms at 30k chunks). The HNSW index is not made here but by `PgStore.ensure_vector_index`, once the store
    is large enough for it (below, an exact scan is used and the index would only slow every insert).
    """
    plain = "ALTER TABLE chunks ALTER COLUMN vector SET STORAGE PLAIN;" if dim <= 1500 else ""
    return [
        f"""
        CREATE TABLE IF NOT EXISTS chunks (
            chunk_id text PRIMARY KEY, nb_sha text NOT NULL, notebook text NOT NULL DEFAULT '',
            root text NOT NULL DEFAULT '', kind text NOT NULL DEFAULT '', cells integer[] NOT NULL DEFAULT '{{}}',
            cell_ids text[] NOT NULL DEFAULT '{{}}', anchor integer NOT NULL DEFAULT 0,
            anchor_id text NOT NULL DEFAULT '', heading text NOT NULL DEFAULT '', text text NOT NULL DEFAULT '',
            year integer, project text NOT NULL DEFAULT '', author text NOT NULL DEFAULT '',
            tags text[] NOT NULL DEFAULT '{{}}', deprecated boolean NOT NULL DEFAULT false,
            stale boolean NOT NULL DEFAULT false, health real NOT NULL DEFAULT 1,
            vector vector({int(dim)}), tsv tsvector, ntok integer NOT NULL DEFAULT 0);
        {plain}
        CREATE INDEX IF NOT EXISTS chunks_nb_sha ON chunks (nb_sha);
        CREATE INDEX IF NOT EXISTS chunks_project ON chunks (project);
        CREATE INDEX IF NOT EXISTS chunks_year ON chunks (year);
        CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING gin (tsv);
        CREATE OR REPLACE FUNCTION chunk_tsv(body text) RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT to_tsvector('english'::regconfig, regexp_replace(left(body, 500000), '[[:punct:]]+', ' ', 'g'))
        $$;
        CREATE OR REPLACE FUNCTION chunks_fill_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.tsv := chunk_tsv(NEW.text);
            NEW.ntok := (SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)
                         FROM unnest(NEW.tsv));
            RETURN NEW;
        END $$;
        CREATE OR REPLACE TRIGGER chunks_fill_tsv BEFORE INSERT OR UPDATE OF text ON chunks
            FOR EACH ROW EXECUTE FUNCTION chunks_fill_tsv();
        CREATE TABLE IF NOT EXISTS term_stats (lexeme text PRIMARY KEY, ndoc integer NOT NULL);
        CREATE TABLE IF NOT EXISTS text_stats (
            id integer PRIMARY KEY CHECK (id = 1), n_docs bigint NOT NULL, avg_len double precision NOT NULL,
            mods bigint NOT NULL DEFAULT 0);
        """,
        _TOKENIZER_STEP,
        _RECOMPOSE_STEP,
    ]
