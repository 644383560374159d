"""Builds a small synthetic AppWorld data folder with AppWorld's own library.

Run by the AppWorld venv's interpreter: ``python build_data.py ROOT``. It writes what
AppWorld reads from ``ROOT/data``: the API docs of every app (built from the apps' code
by `ApiDocCollection.build`), and per task its specs, its databases (every app's schema
created by `ModelCollection`, with the supervisor, the supervisor's active task and the
matching admin user) and its ground truth (`GroundTruth.save`: solution, evaluation code,
test data, answer), plus the dataset split files. AppWorld loads every app's databases
and docs for any task, so no app can be left out; the records are the supervisor's, and
for the login task a Spotify account and its password in the supervisor's records.

Four tasks in three scenarios (a1b2c3d: _1, _2; e4f5a6b: _1; c5d6e7f: _1); the first
three ask for a supervisor fact, the login task for the first name on the supervisor's
Spotify account (read after logging in with the password the supervisor app shows:
AppWorld's login draws the token's expiry from its random_seed, so the printed token is
the same in two harnesses only when they seed alike). Each is checked by the task's own
evaluation code against the answer the agent's `complete_task` stored.
"""

from __future__ import annotations

import json
import os
import sys

SUPERVISOR = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada@example.com",
    "phone_number": "5550001111",
}
# task id -> (instruction, the supervisor field that answers it)
TASKS = {
    "a1b2c3d_1": ("What is my email address?", "email"),
    "a1b2c3d_2": ("What is my phone number?", "phone_number"),
    "e4f5a6b_1": ("What is my last name?", "last_name"),
    "c5d6e7f_1": ("What is the first name on my Spotify account?", "spotify_first_name"),
}
# The login task's records: the supervisor's Spotify account and its password.
SPOTIFY = {"first_name": "Augusta", "last_name": "King", "password": "sp0tify-pass"}
LOGIN_TASK = "c5d6e7f_1"
SPLITS = {
    "dev": ["a1b2c3d_1", "a1b2c3d_2", "e4f5a6b_1", "c5d6e7f_1"],
    "train": ["e4f5a6b_1"],
    "test_normal": ["a1b2c3d_1", "a1b2c3d_2", "e4f5a6b_1"],
    "test_challenge": ["a1b2c3d_2"],
}
REQUIREMENT = "the answer is the right supervisor fact"
SOLUTION = """def solution(apis, requester):
    profile = apis.supervisor.show_profile()
    apis.supervisor.complete_task(answer=profile["{field}"])
"""
LOGIN_SOLUTION = """def solution(apis, requester):
    passwords = apis.supervisor.show_account_passwords()
    password = next(p["password"] for p in passwords if p["account_name"] == "spotify")
    token = apis.spotify.login(username="{email}", password=password)["access_token"]
    account = apis.spotify.show_account(access_token=token)
    apis.supervisor.complete_task(answer=account["first_name"])
"""
EVALUATION = """def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    import json

    with test("{requirement}"):
        (task,) = models.end.supervisor.Task.all()
        test.answer(json.loads(task.answer), ground_truth_answer)
"""


def build(root: str) -> None:
    data = os.path.join(root, "data")
    os.makedirs(data, exist_ok=True)
    os.environ["APPWORLD_ROOT"] = root  # AppWorld's path store reads it on every use

    import appworld.ground_truth as ground_truth_module
    from appworld.apps import get_all_apps
    from appworld.collections.api_docs import ApiDocCollection
    from appworld.collections.models import ModelCollection
    from appworld.common.constants import CANARY_STRING, DB_VERSION
    from appworld.ground_truth import GroundTruth

    # ApiDocCollection.save also writes the openapi format, which needs a package the
    # venv lacks; the standard format (one file per app) is all AppWorld loads.
    standard = os.path.join(data, "api_docs", "standard")
    os.makedirs(standard, exist_ok=True)
    for app_name, docs in ApiDocCollection.build().items():
        for doc in docs.values():
            doc["canary_string"] = CANARY_STRING
        with open(os.path.join(standard, app_name + ".json"), "w") as handle:
            json.dump(docs, handle)
    # GroundTruth.save formats the files it wrote with ruff (cosmetic; not in the venv).
    ground_truth_module.run_ruff = lambda *args, **kwargs: None

    apps = get_all_apps()
    for task_id, (instruction, field) in TASKS.items():
        models = ModelCollection.load(
            to_db_home_path=f":memory:synthetic-{task_id}", load_apps=apps, create_db=True
        )
        person = {**SUPERVISOR, "birthday": "1990-01-01"}
        supervisor = models.supervisor.Supervisor.create_save(**person)
        models.supervisor.Task.create_save(supervisor_id=supervisor.id, instruction=instruction)
        models.admin.MainUser.create_save(**person)
        login = task_id == LOGIN_TASK
        if login:
            models.supervisor.AccountPassword.create_save(
                supervisor_id=supervisor.id, account_name="spotify", password=SPOTIFY["password"]
            )
            models.spotify.User.create_save(
                first_name=SPOTIFY["first_name"],
                last_name=SPOTIFY["last_name"],
                email=SUPERVISOR["email"],
                password=SPOTIFY["password"],
                verified=True,
            )
        task_dir = os.path.join(data, "tasks", task_id)
        os.makedirs(task_dir, exist_ok=True)
        models.save(db_home_path=os.path.join(task_dir, "dbs"), app_names=apps, format="full")
        models.close()
        specs = {
            "instruction": instruction,
            "supervisor": SUPERVISOR,
            "datetime": "2023-05-18T12:00:00",
            "db_version": DB_VERSION,
            "canary_string": CANARY_STRING,
        }
        with open(os.path.join(task_dir, "specs.json"), "w") as handle:
            json.dump(specs, handle)
        solution = (
            LOGIN_SOLUTION.format(email=SUPERVISOR["email"])
            if login
            else SOLUTION.format(field=field)
        )
        GroundTruth(
            task_id=task_id,
            required_apps=["supervisor", "spotify"] if login else ["supervisor"],
            public_data={},
            private_data={},
            answer=SPOTIFY["first_name"] if login else SUPERVISOR[field],
            evaluation_code=EVALUATION.format(requirement=REQUIREMENT),
            solution_code=solution,
            compiled_solution_code=solution,
            generator_code="",
            test_data=[{"requirement": REQUIREMENT, "label": "no_op_fail"}],
            # num_solution_code_lines given: AppWorld would count them with black.
            metadata={
                "difficulty": 1,
                "mode": "full",
                "num_solution_code_lines": 5 if login else 2,
            },
            api_calls=[],
        ).save(mode="full")
    os.makedirs(os.path.join(data, "datasets"), exist_ok=True)
    for split, ids in SPLITS.items():
        with open(os.path.join(data, "datasets", split + ".txt"), "w") as handle:
            handle.write("\n".join(ids) + "\n")


if __name__ == "__main__":
    build(sys.argv[1])
