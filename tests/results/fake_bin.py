"""A folder of fake sima-* programs for the results/ tests: one Python script (its text) installed
under each name, so a launcher under test runs it instead of the real trainer or evaluator."""
import os


def install(folder, script, names=("sima-train", "sima-eval")):
    """Writes `script` as folder/bin/<name> for each name, executable; returns folder/bin."""
    fake = os.path.join(folder, "bin")
    os.makedirs(fake, exist_ok=True)
    for b in names:
        with open(os.path.join(fake, b), "w") as f:
            f.write(script)
        os.chmod(os.path.join(fake, b), 0o755)
    return fake
