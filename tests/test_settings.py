import pytest

from ftcli.errors import UsageError
from ftcli.settings import (
    check_bucket,
    check_project,
    check_region,
    effective,
    load_config_file,
    resolve,
    save_config_file,
)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    for var in ("FTCLI_PROJECT", "FTCLI_REGION", "FTCLI_BUCKET", "FTCLI_SERVICE_ACCOUNT", "GOOGLE_CLOUD_PROJECT",
                "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_ACTIVE_CONFIG_NAME", "CLOUDSDK_AI_REGION",
                "CLOUDSDK_COMPUTE_REGION", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)


def test_precedence_flags_env_file_gcloud(tmp_path, monkeypatch):
    gcloud = tmp_path / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "active_config").write_text("work")
    (gcloud / "configurations" / "config_work").write_text("[core]\nproject = from-gcloud\n[ai]\nregion = asia-east1\n")
    s = resolve(bucket="gs://my-bucket")
    assert (s.project, s.region) == ("from-gcloud", "asia-east1")
    save_config_file({"project": "from-file", "bucket": "gs://file-bucket/pre"})
    s = resolve()
    assert (s.project, s.bucket, s.bucket_name, s.prefix) == ("from-file", "gs://file-bucket/pre", "file-bucket", "pre")
    monkeypatch.setenv("FTCLI_PROJECT", "from-env")
    assert resolve().project == "from-env"
    assert resolve(project="from-flag").project == "from-flag"


def test_gcloud_values_are_taken_as_gcloud_takes_them(tmp_path, monkeypatch):
    """gcloud's configuration named by CLOUDSDK_ACTIVE_CONFIG_NAME, its CLOUDSDK_* property variables over the file,
    and GOOGLE_CLOUD_PROJECT over gcloud as Google's libraries take it: the file of the configuration in
    `active_config` was read whatever gcloud was using, and a job went to that project."""
    configs = tmp_path / "gcloud" / "configurations"
    configs.mkdir(parents=True)
    (tmp_path / "gcloud" / "active_config").write_text("dev")
    (configs / "config_dev").write_text("[core]\nproject = dev-project\n[ai]\nregion = asia-east1\n")
    (configs / "config_prod").write_text("[core]\nproject = prod-project\n[compute]\nregion = europe-west4\n")

    def where(key):
        v = effective()[key]
        return v.value, v.origin

    assert where("project") == ("dev-project", "gcloud configuration dev (core/project)")
    monkeypatch.setenv("CLOUDSDK_ACTIVE_CONFIG_NAME", "prod")
    assert where("project") == ("prod-project", "gcloud configuration prod (core/project)")
    assert where("region") == ("europe-west4", "gcloud configuration prod (compute/region)")
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "env-project")
    monkeypatch.setenv("CLOUDSDK_COMPUTE_REGION", "us-east4")
    assert (where("project"), where("region")) == (("env-project", "CLOUDSDK_CORE_PROJECT"),
                                                   ("us-east4", "CLOUDSDK_COMPUTE_REGION"))
    monkeypatch.setenv("CLOUDSDK_AI_REGION", "us-west1")  # ai/region comes before compute/region
    assert where("region") == ("us-west1", "CLOUDSDK_AI_REGION")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "adc-project")
    assert where("project") == ("adc-project", "GOOGLE_CLOUD_PROJECT")
    save_config_file({"project": "file-project"})  # ftcli's own layers still come first
    assert resolve(bucket="gs://b-1").project == "file-project"


@pytest.mark.parametrize("text", ["Prod", "my prod", "prod_eu", "-prod"])
def test_a_name_gcloud_never_writes_in_active_config_is_read_as_gcloud_reads_it(tmp_path, caplog, text):
    # gcloud deletes such an active_config and reads its default configuration; ftcli read config_Prod (on macOS's
    # case-insensitive disk, config_prod: another project than gcloud's), or warned of a configuration gcloud
    # never looks for.
    configs = tmp_path / "gcloud" / "configurations"
    configs.mkdir(parents=True)
    (tmp_path / "gcloud" / "active_config").write_text(text)
    (configs / "config_default").write_text("[core]\nproject = default-project\n")
    (configs / f"config_{text}").write_text("[core]\nproject = other-project\n")
    assert (effective()["project"].value, effective()["project"].origin) == (
        "default-project", "gcloud configuration default (core/project)")
    assert caplog.records == []


def test_a_service_account_keys_project_is_the_last_default(tmp_path, monkeypatch):
    """CI given only a key (GOOGLE_APPLICATION_CREDENTIALS) had "no Google Cloud project", though google.auth.default
    returns the key's project_id; a user login's quota_project_id is no default project; gcloud's project and
    GOOGLE_CLOUD_PROJECT still come first."""
    key = tmp_path / "key.json"
    key.write_text('{"type": "service_account", "project_id": "key-project", "client_email": "a@b.com"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    v = effective()["project"]
    assert (v.value, v.source, v.origin) == ("key-project", "adc",  # Google's libraries read it, not gcloud
                                             f"project_id of {key} (GOOGLE_APPLICATION_CREDENTIALS)")
    assert resolve(bucket="gs://b-1").project == "key-project"
    configs = tmp_path / "gcloud" / "configurations"
    configs.mkdir(parents=True)
    (configs / "config_default").write_text("[core]\nproject = gcloud-project\n")
    assert effective()["project"].value == "gcloud-project"
    assert effective()["project"].source == "gcloud"
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    v = effective()["project"]
    assert (v.value, v.source, v.origin) == ("env-project", "adc", "GOOGLE_CLOUD_PROJECT")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    (configs / "config_default").unlink()
    # without the variable, gcloud's own ADC file is read the same way; a login's file names no project
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    adc = tmp_path / "gcloud" / "application_default_credentials.json"
    adc.write_text('{"type": "authorized_user", "quota_project_id": "billed-project", "refresh_token": "x"}')
    assert effective()["project"].value is None
    adc.write_text('{"type": "service_account", "project_id": "adc-key-project"}')
    assert effective()["project"].origin == f"project_id of {adc}"
    adc.write_text("not json")  # the credentials check says what is wrong with it, not the settings
    with pytest.raises(UsageError, match="^no Google Cloud project: pass --project ID"):
        resolve(bucket="gs://b-1")


def test_an_empty_gcloud_property_is_unset_and_gcloud_project_is_read_as_google_auth_reads_it(tmp_path, monkeypatch):
    """A gcloud property written empty (`project =`, `region =`) is not set: read as a value, an empty ai/region hid
    the compute/region under it and the job went to us-central1, and an empty core/project hid the key file's
    project. GCLOUD_PROJECT is google-auth's older name for GOOGLE_CLOUD_PROJECT, which wins over it
    (`google.auth.default`: os.environ.get(PROJECT, os.environ.get(LEGACY_PROJECT)), google-auth 2.63.0)."""
    configs = tmp_path / "gcloud" / "configurations"
    configs.mkdir(parents=True)
    (configs / "config_default").write_text("[core]\nproject =\n[ai]\nregion =  \n[compute]\nregion = europe-west4\n")
    key = tmp_path / "key.json"
    key.write_text('{"type": "service_account", "project_id": "key-project"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))

    def said(key):
        v = effective()[key]
        return v.value, v.source, v.origin

    assert said("project") == ("key-project", "adc", f"project_id of {key} (GOOGLE_APPLICATION_CREDENTIALS)")
    assert said("region") == ("europe-west4", "gcloud", "gcloud configuration default (compute/region)")
    monkeypatch.setenv("GCLOUD_PROJECT", "legacy-project")
    assert said("project") == ("legacy-project", "adc", "GCLOUD_PROJECT")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    assert said("project") == ("env-project", "adc", "GOOGLE_CLOUD_PROJECT")


def test_an_image_mirror_from_a_variable_loses_its_trailing_slash(monkeypatch):
    # `config set` drops it; FTCLI_IMAGE_MIRROR (and the file, edited by hand) must not give the jobs
    # "REPOSITORY//pytorch/pytorch:..."
    monkeypatch.setenv("FTCLI_IMAGE_MIRROR", "europe-west4-docker.pkg.dev/my-proj/dockerhub/")
    s = resolve(project="my-project", bucket="gs://b-1/runs/")
    assert (s.image_mirror, s.bucket) == ("europe-west4-docker.pkg.dev/my-proj/dockerhub", "gs://b-1/runs")


def test_a_flag_given_empty_is_refused_not_passed_over(monkeypatch):
    # `ftcli train --project "$PROJECT"` with PROJECT unset: the empty flag was skipped and the job went to the config
    # file's project (or gcloud's) without a word. An empty variable still counts as unset.
    save_config_file({"project": "file-project", "bucket": "gs://file-bucket", "region": "europe-west4"})
    with pytest.raises(UsageError) as e:
        resolve(project="", region="", bucket="", service_account="")
    assert e.value.problems == [
        "--project: '' is not a valid project id: it is empty (`gcloud projects list` shows your projects' ids)",
        "--region: unknown Vertex AI region ''; e.g. us-central1, europe-west4, asia-southeast1",
        "--bucket must be a gs:// URI (gs://BUCKET[/PREFIX]), got ''",
        "--service-account must be a service account e-mail (NAME@PROJECT.iam.gserviceaccount.com), got ''"]
    monkeypatch.setenv("FTCLI_PROJECT", "")
    assert resolve().project == "file-project"


@pytest.mark.parametrize("value,meant", [
    # It said only "must be a gs:// URI (gs://BUCKET[/PREFIX]), got 'my-bucket'", not the URI meant
    ("my-bucket", "gs://my-bucket"), ("my-bucket/runs", "gs://my-bucket/runs"),
    ("gcs://my-bucket/runs", "gs://my-bucket/runs"), ("gs:/my-bucket", "gs://my-bucket"),
    # nothing is made up for a local path, another cloud's URI, or a name Cloud Storage refuses
    ("/tmp/out", None), ("./runs", None), ("s3://my-bucket", None), ("My Bucket", None)])
def test_a_bucket_without_gs_says_the_uri_it_meant(value, meant):
    assert check_bucket(value) == (f"--bucket must be a gs:// URI (gs://BUCKET[/PREFIX]), got {value!r}"
                                   + (f": write {meant}" if meant else ""))


@pytest.mark.parametrize("project,says", [
    # Found by hand: each said only "(6-30 lowercase letters, digits, '-')", which the last two fit
    ("My-Project", "project ids have no capital letters; a project's name is not its id"),
    ("my project", "project ids have only lowercase letters, digits and '-'"),
    ("my_project", "project ids have only lowercase letters, digits and '-'"),
    ("abc", "it has 3 characters; project ids have 6 to 30"),
    ("a" * 31, "it has 31 characters; project ids have 6 to 30"),
    ("1st-project", "project ids start with a letter"),
    ("my-project-", "project ids do not end with '-'"),
    ("Example.com:my-project", "a domain-scoped project id is DOMAIN:ID, its domain in lowercase"),
    ("12345", "it has 5 characters; project ids have 6 to 30"),  # no project number is this short
])
def test_a_bad_project_id_says_which_rule_it_breaks(project, says):
    problem = check_project(project, "--project")
    assert problem is not None and problem.startswith(f"--project: {project!r} is not a valid project id: {says}")


@pytest.mark.parametrize("project", ["my-project", "a23456", "a" * 30, "example.com:my-project", "123456789012"])
def test_project_ids_and_numbers_are_taken(project):
    assert check_project(project) is None


@pytest.mark.parametrize("region,meant", [("US-CENTRAL1", "us-central1"), ("Europe-West4", "europe-west4"),
                                          (" us-central1", "us-central1")])
def test_a_region_in_capitals_or_with_a_space_names_the_region_meant(region, meant):
    # Found by hand: `ftcli config set region US-CENTRAL1` suggested nothing ("e.g. us-central1, europe-west4, ...")
    assert check_region(region, "region") == f"region: unknown Vertex AI region {region!r}; did you mean {meant}?"


@pytest.mark.parametrize("region,hint", [
    # typos keep their region
    ("us-centrl1", "did you mean us-central1?"), ("europe-west-4", "did you mean europe-west4?"),
    ("US-CENTRAL1", "did you mean us-central1?"), ("us-cental", "did you mean us-central1?"),
    ("us-central1-a", "did you mean us-central1?"),  # a zone
    ("us-east2", "did you mean us-east1, us-east4 or us-east5?"),  # equally near: each
    # far ones, and ones too many regions are as near to, get the examples: difflib's 0.6 cutoff suggested
    # asia-northeast1 for mars-north1 (ratio 0.69, from the parts region names share)
    ("mars-north1", "e.g. us-central1, europe-west4, asia-southeast1"),
    ("eu-west1", "e.g. us-central1, europe-west4, asia-southeast1"),
    ("europe-west5", "e.g. us-central1, europe-west4, asia-southeast1"),
    ("global", "e.g. us-central1, europe-west4, asia-southeast1"),
])
def test_a_region_is_suggested_only_when_it_is_near(region, hint):
    assert check_region(region) == f"--region: unknown Vertex AI region {region!r}; {hint}"


def test_default_region_and_gcs_paths():
    s = resolve(project="my-project", bucket="gs://my-bucket/x/")
    assert s.region == "us-central1" and s.bucket == "gs://my-bucket/x"
    assert s.gcs_path("packages", "p.tar.gz") == "gs://my-bucket/x/ftcli/packages/p.tar.gz"


def test_every_problem_at_once_with_the_fix():
    with pytest.raises(UsageError) as e:
        resolve(region="us-centrall1", bucket="my-bucket", service_account="me")
    problems = e.value.problems
    assert len(problems) == 4
    assert "no Google Cloud project" in problems[0] and "ftcli config set project" in problems[0]
    assert "did you mean us-central1?" in problems[1]
    assert "gs://" in problems[2]
    assert "service account e-mail" in problems[3]


@pytest.mark.parametrize("account", [
    "trainer@my-project.iam.gserviceaccount.com", "123456789-compute@developer.gserviceaccount.com",
    # App Engine's default service account: refused as 'not a service account e-mail', though a job runs as it
    "my-project@appspot.gserviceaccount.com"])
def test_every_kind_of_service_account_a_job_runs_as_is_taken(account):
    assert resolve(project="my-project", bucket="gs://my-bucket", service_account=account).service_account == account


@pytest.mark.parametrize("account", [
    "trainer-01@my-project.iam.gserviceaccount.com", "abcdef@my-project.iam.gserviceaccount.com",
    "a" * 30 + "@my-project.iam.gserviceaccount.com",
    "Trainer@my-project.iam.gserviceaccount.com",  # an e-mail address's case does not matter
    "trainer@my-project.example.com.iam.gserviceaccount.com",  # a domain-scoped project's
    "service-123456789012@gcp-sa-aiplatform.iam.gserviceaccount.com",  # a service agent: Google's names
    "123456789012-compute@developer.gserviceaccount.com"])
def test_service_accounts_iam_can_create_are_taken(account):
    assert resolve(project="my-project", bucket="gs://my-bucket", service_account=account).service_account == account


@pytest.mark.parametrize("account, says", [
    ("ab@my-project.iam.gserviceaccount.com", "is no service account IAM creates: the name before '@' must be 6-30"),
    ("a" * 31 + "@my-project.iam.gserviceaccount.com", "is no service account IAM creates"),
    ("1trainer@my-project.iam.gserviceaccount.com", "is no service account IAM creates"),
    ("trainer-@my-project.iam.gserviceaccount.com", "is no service account IAM creates"),
    ("my_trainer@my-project.iam.gserviceaccount.com", "is no service account IAM creates"),
    ("trainer@proj.iam.gserviceaccount.com", "names no project: between '@' and '.iam' comes a project id"),
    ("trainer@My_Project!.iam.gserviceaccount.com", "names no project"),
    ("my-project-compute@developer.gserviceaccount.com", "is no Compute Engine default service account: it is "
     "PROJECT_NUMBER-compute@developer.gserviceaccount.com"),
    ("-compute@developer.gserviceaccount.com", "is no Compute Engine default service account"),  # (no number)
    ("my_project@appspot.gserviceaccount.com", "is no App Engine default service account")])
def test_service_accounts_iam_never_creates_are_refused_in_one_line(account, says):
    with pytest.raises(UsageError) as e:
        resolve(project="my-project", bucket="gs://my-bucket", service_account=account)
    assert str(e.value).startswith(f"--service-account: {account!r} {says}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("account", ["me@example.com", "my-project@appspot.gserviceaccount.com.evil", "@appspot."
                                     "gserviceaccount.com", "trainer@my-project.iam.gserviceaccount.com.evil.com",
                                     "trainer@iam.gserviceaccount.com"])  # (no project)
def test_what_is_not_a_service_account_is_refused(account):
    with pytest.raises(UsageError, match="must be a service account e-mail"):
        resolve(project="my-project", bucket="gs://my-bucket", service_account=account)


def test_a_command_that_reads_jobs_only_is_not_stopped_by_a_bad_bucket_or_service_account(monkeypatch):
    # `jobs list` refused to run over a service account (from a variable or a hand-edited file) it never uses.
    monkeypatch.setenv("FTCLI_SERVICE_ACCOUNT", "notanemail")
    monkeypatch.setenv("FTCLI_BUCKET", "my-bucket")
    assert resolve(project="my-project", need_bucket=False).project == "my-project"
    with pytest.raises(UsageError) as e:
        resolve(project="my-project")  # a submission uses both: both refused
    assert len(e.value.problems) == 2


def test_missing_bucket_is_fine_when_not_needed():
    assert resolve(project="my-project", need_bucket=False).bucket == ""
    with pytest.raises(UsageError, match="no staging bucket"):
        resolve(project="my-project")


def test_bad_config_file_is_one_line(tmp_path):
    (tmp_path / "config.toml").write_text("project = [unclosed")
    with pytest.raises(UsageError, match="is not valid TOML"):
        load_config_file()


def test_several_regions_where_one_is_taken_are_said_as_such(monkeypatch):
    # FTCLI_REGION written as `ftcli train --region` takes it: "did you mean europe-west4?", as if us-central1 were
    # a typo
    monkeypatch.setenv("FTCLI_REGION", "us-central1,europe-west4")
    with pytest.raises(UsageError) as e:
        resolve(project="my-project", bucket="gs://b-1")
    assert e.value.message == ("FTCLI_REGION: 'us-central1,europe-west4' names several regions, where one is taken (a "
                               "list of regions to fall back on is given to `ftcli train --region`)")


def test_a_region_with_a_stray_comma_is_taken_for_a_typo_of_one_region(monkeypatch):
    # `FTCLI_REGION=us-central1,` (a list cut short) names one region: it is not "several regions"
    monkeypatch.setenv("FTCLI_REGION", "us-central1,")
    with pytest.raises(UsageError) as e:
        resolve(project="my-project", bucket="gs://b-1")
    assert e.value.message == "FTCLI_REGION: unknown Vertex AI region 'us-central1,'; did you mean us-central1?"


def test_a_bucket_can_name_the_jobs_region(monkeypatch):
    # one staging bucket per region, from any layer: Vertex wants the bucket in the job's region
    save_config_file({"project": "my-project", "bucket": "gs://ml-{region}/runs"})
    assert resolve(region="europe-west4").bucket == "gs://ml-europe-west4/runs"
    monkeypatch.setenv("FTCLI_REGION", "asia-east1")
    assert resolve().bucket_name == "ml-asia-east1"


@pytest.mark.parametrize("typo, meant", [("service-account", "service_account"), ("Region", "region"),
                                         ("regoin", "region"), ("projet", "project"), ("buckets", "bucket"),
                                         ("location", "region"), ("staging_bucket", "bucket"),
                                         ("project_id", "project"), ("service_account_email", "service_account"),
                                         ("image-mirror-url", "image_mirror"), ("bucket_name", "bucket")])
def test_a_mistyped_key_in_the_config_file_is_refused_not_ignored(tmp_path, typo, meant):
    # A hand-edited `service-account = ...` was dropped without a word: the job ran as the default service account
    # (or, for `regoin`, in us-central1).
    (tmp_path / "config.toml").write_text(f'project = "my-project"\n{typo} = "europe-west4"\n')
    with pytest.raises(UsageError, match=f"unknown key '{typo}'; did you mean {meant}") as e:
        resolve()
    assert str(tmp_path / "config.toml") in str(e.value)


@pytest.mark.parametrize("toml,kind", [
    ('region = ["us-central1"]', "a list"), ("region = []", "a list"), ("region = true", "true/false"),
    ("[region]\nname = 'us-central1'", "a table"), ("region = 1.5", "a decimal number"),
    ("region = 2026-01-01", "a date or time"), ("[[region]]\nname = 'us-central1'", "an array of tables")])
def test_a_setting_that_is_not_a_string_in_the_config_file_is_refused_in_one_line(tmp_path, toml, kind):
    # Read as its Python text: `region = ["us-central1"]` was "unknown Vertex AI region \"['us-central1']\"", and
    # `region = true` the region 'True'
    (tmp_path / "config.toml").write_text(toml + "\n")
    with pytest.raises(UsageError) as e:
        load_config_file()
    assert e.value.message == f"{tmp_path / 'config.toml'}: region must be a string, not {kind}"
    assert e.value.hint == 'write it in quotes: region = "VALUE"'


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_config_file_windows_powershell_wrote_is_read(tmp_path, encoding):
    # `'region = "europe-west4"' | Out-File -Encoding utf8 config.toml` in Windows PowerShell writes a byte-order
    # mark (`> config.toml`, UTF-16 with one): "not valid TOML (Invalid statement (at line 1, column 1))" for a line
    # that looks right, and a UTF-8 decoding error. `config set` edits it, and keeps its mark, its encoding and its
    # CRLF line breaks: it was saved as UTF-8 without a mark, the new line ending in a bare LF.
    config = tmp_path / "config.toml"
    config.write_text('# mine\r\nregion = "europe-west4"\r\n', encoding=encoding, newline="")
    assert load_config_file() == {"region": "europe-west4"}
    save_config_file({"project": "my-project"})
    assert config.read_bytes() == '# mine\r\nregion = "europe-west4"\r\nproject = "my-project"\r\n'.encode(encoding)
    config.write_bytes(b'region = "caf\xe9"\n')  # Latin-1 is still refused, naming the file
    with pytest.raises(UsageError, match=f"^{config} is not valid TOML"):
        load_config_file()


def test_a_project_number_without_quotes_is_taken(tmp_path):
    (tmp_path / "config.toml").write_text("project = 123456789012\n")
    assert load_config_file() == {"project": "123456789012"}


def test_keys_and_tables_of_the_users_own_are_kept_and_said_to_be_ignored(tmp_path, caplog):
    # Ignored without a word: the user could not tell `zone = "europe-west4-a"` changed nothing. A warning, not an
    # error: every command reads the file, and a key no setting is near must not stop `ftcli jobs cancel`.
    (tmp_path / "config.toml").write_text('project = "my-project"\nteam = "nlp"\n[notes]\ntext = "eu"\n')
    assert resolve(need_bucket=False).project == "my-project"
    (record,) = caplog.records
    assert record.getMessage() == f"{tmp_path / 'config.toml'}: ftcli ignores the unknown key 'team' and table [notes]"
    assert record.hint == ("ftcli reads project, region, bucket, service_account, image_mirror; remove them with "
                           "`ftcli config unset team` and `ftcli config unset notes`, or make them comments (#)")
    save_config_file({"region": "europe-west4"})
    text = (tmp_path / "config.toml").read_text()
    assert 'team = "nlp"' in text and "[notes]" in text
    assert resolve(need_bucket=False).region == "europe-west4"


def test_an_array_of_tables_is_said_to_be_one(tmp_path, caplog):
    # `[[profiles]]` (a profile per region, as TOML writes a list of them) was "the unknown key 'profiles'": the
    # file has no such key line. It is named as the file writes it, wherever a key or table would be.
    config = tmp_path / "config.toml"
    config.write_text('project = "my-project"\nteam = "nlp"\n[[profiles]]\nname = "eu"\n[[profiles]]\nname = "us"\n')
    assert load_config_file() == {"project": "my-project"}
    (record,) = caplog.records
    assert record.getMessage() == f"{config}: ftcli ignores the unknown key 'team' and array of tables [[profiles]]"
    assert record.hint == ("ftcli reads project, region, bucket, service_account, image_mirror; remove them with "
                           "`ftcli config unset team` and `ftcli config unset profiles`, or make them comments (#)")
    config.write_text('[[regoin]]\nname = "europe-west4"\n')
    with pytest.raises(UsageError) as e:
        load_config_file()
    assert e.value.message == f"{config}: unknown array of tables [[regoin]]; did you mean region?"


@pytest.mark.parametrize("toml, says", [
    ('[notes]\ntext = "x"\nregion = "europe-west4"', "region is inside the table [notes]"),
    ('[ftcli]\nproject = "my-project"', "project is inside the table [ftcli]"),
    ('[profiles.eu]\nRegion = "europe-west4"', "'Region' (did you mean region?) is inside the table [profiles.eu]"),
    ('ftcli.bucket = "gs://b-1"', "bucket is inside the table [ftcli]"),
    ('[[profiles]]\nname = "eu"\nregion = "europe-west4"', "region is inside the array of tables [[profiles]]"),
    ('[[profiles]]\nname = "eu"\n[[profiles]]\nproject = "my-project"',
     "project is inside the array of tables [[profiles]]"),
    ('[ftcli]\n[[ftcli.eu]]\nRegion = "europe-west4"',
     "'Region' (did you mean region?) is inside the array of tables [[ftcli.eu]]"),
    # a table inside a table, named as a setting, is a table like any other: what is in it is said
    ('[profiles.region]\nproject = "my-project"', "project is inside the table [profiles.region]")])
def test_a_setting_inside_a_table_is_refused_not_ignored(tmp_path, toml, says):
    # A line appended below a [table] belongs to it (`echo 'region = "europe-west4"' >> config.toml`), and a
    # [ftcli] table reads like a profile: the setting was not read, and the job went to us-central1. A [[profiles]]
    # array of tables was only warned about as unknown, the region under it unread all the same.
    (tmp_path / "config.toml").write_text(toml + "\n")
    with pytest.raises(UsageError) as e:
        load_config_file()
    assert e.value.message == f"{tmp_path / 'config.toml'}: {says}, where ftcli does not read it"
    assert e.value.hint == ("move it above the file's first [table] line: ftcli reads project, region, bucket, "
                            "service_account, image_mirror only at the top of the file")


# Cloud Storage "Bucket naming guidelines" (https://cloud.google.com/storage/docs/naming-buckets, read 2026-11-27):
# each refused name gets one line that says what is wrong.
@pytest.mark.parametrize(("name", "problem"), [
    ("ab", "is too short: bucket names have 3 to 63 characters"),
    ("a" * 64, "has 64 characters; at most 63 (up to 222 only for names with dots)"),
    ("a" * 100, "has 100 characters; at most 63"),  # the old regex took 3-222 without dots
    (".".join(["a" * 63] * 3) + "." + "a" * 32, "has 224 characters; at most 222 even with dots"),
    (".".join(["a" * 63] * 3) + "." + "a" * 31, "has 223 characters; at most 222 even with dots"),
    ("a" * 64 + ".com", "has a dot-separated part of 64 characters; each part is at most 63"),
    ("my..bucket", "has an empty part between dots"),
    ("192.168.5.4", "looks like an IP address"),
    ("goog-data", "begins with 'goog', which Cloud Storage reserves"),
    ("googdata", "begins with 'goog'"),
    ("my-google-bucket", "contains 'google' (or a look-alike)"),
    ("my-g00gle-bucket", "contains 'google' (or a look-alike)"),
    ("My-Bucket", "may contain only lowercase letters, digits, '-', '_' and '.'"),
    ("-bucket", "must start and end with a letter or digit"),
    ("bucket-", "must start and end with a letter or digit"),
    ("bucket.", "must start and end with a letter or digit"),
])
def test_bucket_names_follow_cloud_storage_rules(name, problem):
    from ftcli.settings import check_bucket

    message = check_bucket(f"gs://{name}/x")
    assert message == f"--bucket: bucket name {name!r} {problem}" or (
        message is not None and message.startswith(f"--bucket: bucket name {name!r} ") and problem in message)
    assert "\n" not in message


# The job installs the trainer from /gcs/BUCKET/PREFIX/...: gcsfuse does not support '//' in object names ("Unsupported
# object names", https://github.com/GoogleCloudPlatform/gcsfuse/blob/master/docs/semantics.md, read 2026-11-27) and
# the kernel resolves '.' and '..' in that path, so such a prefix names other objects than the ones uploaded.
@pytest.mark.parametrize(("value", "fix"), [
    ("gs://runs-bucket//x", "gs://runs-bucket/x"),
    ("gs://runs-bucket/x//y", "gs://runs-bucket/x/y"),
    ("gs://runs-bucket/x/../y", "gs://runs-bucket/x/y"),
    ("gs://runs-bucket/./y/", "gs://runs-bucket/y"),
    ("gs://runs-bucket/..", "gs://runs-bucket"),
])
def test_staging_prefix_the_job_cannot_reach_through_gcsfuse_is_refused(value, fix):
    from ftcli.settings import check_bucket

    message = check_bucket(value)
    assert message is not None and message.startswith("--bucket: the prefix ") and message.endswith(f"write {fix}")
    assert check_bucket(value, staging=False) is None  # a gs:// data file is read through the API, not /gcs/


@pytest.mark.parametrize("value", ["gs://runs-bucket/a\nb", "gs://runs-bucket/a\r", "gs://runs-bucket/\n/x"])
def test_a_staging_prefix_with_a_line_break_is_refused(value):
    # Cloud Storage object names cannot hold a carriage return or line feed (settings.object_name_problem): every
    # upload under the prefix would be refused, after the trainer wheel had gone up
    from ftcli.settings import check_bucket

    prefix = value.removeprefix("gs://runs-bucket/")
    assert check_bucket(value) == (f"--bucket: the prefix {prefix!r} has a line break, which Cloud Storage object "
                                   "names cannot hold")


@pytest.mark.parametrize("value", ["gs://runs-bucket/with space #1 [a] é $x", "gs://runs-bucket/a?b*c"])
def test_a_staging_prefix_with_unusual_characters_is_taken(value):
    from ftcli.settings import check_bucket

    assert check_bucket(value) is None


@pytest.mark.parametrize("value", ["gs://runs-bucket", "gs://runs-bucket/", "gs://runs-bucket/a/b.c/d_e", "gs://runs-bucket/x/"])
def test_staging_prefixes_are_accepted(value):
    from ftcli.settings import check_bucket

    assert check_bucket(value) is None


@pytest.mark.parametrize("name", ["abc", "a" * 63, "my_bucket-1", "data.example.com", ".".join(["a" * 63] * 3),
                                  "1.2.3.example", "gog-data", "mygoogbucket"])
def test_valid_bucket_names_are_accepted(name):
    from ftcli.settings import check_bucket

    assert check_bucket(f"gs://{name}") is None


def _set_after(barrier, key: str, value: str) -> None:
    barrier.wait()
    save_config_file({key: value})


def test_a_setting_is_never_added_inside_a_multi_line_string(tmp_path):
    # A string's last line that starts with '#', right above the first table, looks like the comment over that table:
    # a new key put above it goes inside the string, which changes, and no `region` is read back (_with_key_added
    # then lets tomlkit place it).
    config = tmp_path / "config.toml"
    config.write_text("notes = '''\nsee the wiki\n# for prices'''\n[prices]\nT4 = 0.35\n")
    save_config_file({"region": "europe-west4"})
    import tomllib

    assert tomllib.loads(config.read_text()) == {"notes": "see the wiki\n# for prices", "region": "europe-west4",
                                                "prices": {"T4": 0.35}}


def test_settings_saved_at_once_by_several_processes_are_all_kept(tmp_path):
    # `ftcli config set project P & ftcli config set bucket B & ...`: each process read the file before the others
    # wrote it, and the last rename kept only its own key (every one of 40 tries lost one).
    import multiprocessing

    values = {"project": "my-project", "region": "europe-west4", "bucket": "gs://my-bucket/x",
              "service_account": "sa@my-project.iam.gserviceaccount.com"}
    context = multiprocessing.get_context("fork")
    for _ in range(5):
        (tmp_path / "config.toml").unlink(missing_ok=True)
        barrier = context.Barrier(len(values))
        procs = [context.Process(target=_set_after, args=(barrier, k, v)) for k, v in values.items()]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0] * len(values)
        assert load_config_file() == values
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no lock or temporary file left behind


def test_settings_are_saved_again_where_os_has_no_fchmod_or_fcntl(tmp_path, monkeypatch):
    # Windows before Python 3.13: no os.fchmod and no fcntl. The second `ftcli config set` kept the old file's mode
    # with os.fchmod, an AttributeError traceback, and the setting was not saved.
    import sys

    monkeypatch.delattr("os.fchmod")
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` raises ImportError, as there
    save_config_file({"project": "my-project"})
    save_config_file({"bucket": "gs://my-bucket"})
    assert load_config_file() == {"project": "my-project", "bucket": "gs://my-bucket"}
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_gcloud_values_are_read_where_gcloud_keeps_them_on_windows(tmp_path, monkeypatch):
    # %APPDATA%\gcloud there: ~/.config/gcloud was read, which gcloud never writes on Windows, and a user's
    # `gcloud config set project` was ignored ("no Google Cloud project").
    from ftcli import settings

    monkeypatch.delenv("CLOUDSDK_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("APPDATA", str(tmp_path / "Roaming"))
    monkeypatch.setattr(settings, "ON_WINDOWS", True)
    configs = tmp_path / "Roaming" / "gcloud" / "configurations"
    configs.mkdir(parents=True)
    (configs / "config_default").write_text("[core]\nproject = win-project\n[compute]\nregion = europe-west4\n")
    values = effective()
    assert (values["project"].value, values["region"].value) == ("win-project", "europe-west4")
    assert values["project"].origin == "gcloud configuration default (core/project)"
    monkeypatch.setattr(settings, "ON_WINDOWS", False)  # elsewhere: ~/.config/gcloud, which has none
    assert effective()["project"].value is None
