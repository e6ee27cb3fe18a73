import pytest

from search_spaces import SpecError, catalog, load_spec, parse_set_options
from search_spaces.catalog import experiment_names


@pytest.mark.parametrize("name", experiment_names())
def test_the_trial_count_is_the_grid_the_plan_trains(name):
    """The one check of trial counts: the catalog's figure, the spec's and the plan's grid agree."""
    spec, plan = load_spec(name), load_spec(name).plan()
    row = next(r for r in catalog() if r["name"] == name)
    assert row["trials"] == spec.trial_count == plan.trials
    grid = {(p.activation, p.lr, p.dropout, p.seed) for p in plan.grid}
    assert len(grid) == len(plan.grid)  # no point twice
    if spec.search is None and not spec.dropout_for:  # a plain grid: every axis crossed with every other
        assert len(grid) == len(spec.activation) * len(spec.lr) * len(spec.dropout) * len(spec.seed_list) > 0


def test_quick_variant_shrinks_the_run_but_keeps_the_network():
    full, quick = load_spec("mnist_classification"), load_spec("mnist_classification", quick=True)
    assert quick.model == full.model and quick.activation == full.activation
    assert quick.epochs < full.epochs and quick.trial_count < full.trial_count
    assert quick.trial_count >= 3 * 2 * 2  # at least 3 activations × 2 lrs × 2 seeds


def test_catalog_lists_the_papers_sections():
    rows = {row["name"]: row for row in catalog()}
    assert rows["mnist_classification"]["section"].startswith("§3.1") and rows["elu_mnist_learning"]["paper"] == "elu"


def test_set_options_parse_scalars_and_comma_lists():
    assert parse_set_options(["epochs=3", "lr=0.001,0.0001", "activation=gelu,relu", "dropout=0",
                              "model.width=64"]) == {
        "epochs": 3, "lr": [0.001, 0.0001], "activation": ["gelu", "relu"], "dropout": 0, "model.width": 64}


def test_overrides_replace_axes_and_reach_nested_fields():
    spec = load_spec("mnist_classification", overrides=parse_set_options(
        ["epochs=3", "seeds=3", "lr=0.001,0.0001", "activation=gelu,relu", "dropout=0", "model.width=64"]))
    assert (spec.epochs, spec.seed_list, spec.lr, spec.activation, spec.dropout) == (
        3, [0, 1, 2], [0.001, 0.0001], ["gelu", "relu"], [0.0])
    assert spec.model.width == 64 and spec.trial_count == 2 * 2 * 1 * 3


@pytest.mark.parametrize("overrides, message", [
    ({"activation": ["gelu", "mish"]}, r"activation: unknown 'mish'; accepted: relu, gelu, .*soi"),
    ({"lr": -0.1}, r"lr\[0\]: Input should be greater than 0"),
    ({"dropout": 1.0}, r"dropout: .*\[0, 1\)"),
    ({"epochz": 3}, r"epochz: unknown field \(did you mean epochs\?\); accepted: .*epochs"),
    ({"model.depht": 3}, r"model.depht: unknown field \(did you mean depth\?\); accepted: kind, depth, width, init"),
    ({"colour": 3}, r"colour: unknown field; accepted: name, "),  # (nothing close: no guess)
    ({"seeds": 0}, r"seeds: accepted: a count from 1 to 1000 \(seeds 0, 1, …\), or a list of 1 to 1000 distinct seeds "
                   r"in \[0, 2\^32\) \(got 0\)$"),  # (one message for the union, no pydantic member tags)
    ({"seeds": [3, 3]}, r"seeds: accepted: a count .* \(got \[3, 3\]\)$"),
    ({"dataset": "fashionmnist"}, r"dataset: Input should be 'mnist', .* \(got 'fashionmnist'\) \(did you mean fashion_mnist\?\)$"),
    ({"activation": ["gelu_tan"]}, r"activation: unknown 'gelu_tan' \(did you mean gelu_tanh\?\); accepted: relu, "),
    ({"dataset": "svhn"}, r"dataset: Input should be 'mnist', 'fashion_mnist', 'digits', 'cifar10'"),
    ({"seeds": 0}, r"seeds"),
    ({"execution.pack_size": "big"}, r"execution.pack_size: accepted: an integer from 1 to 256, or auto \(got 'big'\)$"),
    ({"execution.pack_size": 0}, r"execution.pack_size: accepted: an integer from 1 to 256, or auto \(got 0\)$"),
    ({"execution.pack_memory_gb": 2, "execution.pack_size": 12},
     r"execution: pack_memory_gb sizes packs when pack_size is auto"),
    ({"execution.gpus_per_trial": "lots"}, r"execution.gpus_per_trial: accepted: a number from 0 to 64 .*, or auto"),
    ({"execution.gpus_per_trial": -1}, r"execution.gpus_per_trial: accepted: a number from 0 to 64"),
    ({"execution.mode": "fast"}, r"execution.mode: Input should be 'auto', 'per_trial' or 'fused'"),
])
def test_bad_values_name_the_field_and_what_is_accepted(overrides, message):
    with pytest.raises(SpecError, match=message) as raised:
        load_spec("mnist_classification", overrides=overrides)
    assert "\n" not in str(raised.value)


def test_unknown_experiment_lists_the_catalog():
    with pytest.raises(SpecError, match="experiment: unknown .mnist_classificaton. \\(did you mean mnist_classification\\?\\); "
                                        "accepted: .*mnist_classification, mnist_robustness"):
        load_spec("mnist_classificaton")


def test_bad_set_syntax():
    with pytest.raises(SpecError, match="--set: expected NAME=VALUE"):
        parse_set_options(["epochs"])


def test_user_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ndataset: digits\nval_size: 100\nepochs: 2\nbatch_size: 32\n"
                    "activation: [silu, lalu]\nlr: [0.01]\nseeds: [7, 9]\n")
    spec = load_spec(str(path))
    assert spec.trial_count == 4 and spec.seed_list == [7, 9] and spec.model.depth == 8


ALL_EXPERIMENTS = {
    # GELU paper
    "mnist_classification", "mnist_robustness", "mnist_autoencoder", "twitter_pos", "timit", "cifar10_shallow",
    "cifar100_wrn", "mnist_soi", "twitter_pos_soi", "timit_soi", "mnist_7layer", "cifar10_small",
    # ELU paper
    "elu_mnist_learning", "elu_mnist_autoencoder", "elu_cifar100_11layer", "elu_cifar_18layer", "elu_imagenet",
    # researchers' own activations on the papers' protocol
    "gelu_sigma_bridge", "activation_zoo",
}


def test_catalog_has_every_experiment_of_both_papers():
    rows = {row["name"]: row for row in catalog()}
    assert set(rows) == ALL_EXPERIMENTS
    for name, row in rows.items():
        spec = load_spec(name)
        assert row["trials"] == spec.trial_count > 0 and row["quick_trials"] <= row["trials"]
        assert spec.paper in ("gelu", "elu", "custom") and spec.section


def test_soi_runs_without_dropout_while_the_others_tune_it():
    spec = load_spec("mnist_soi")
    points = spec.grid_points()
    assert {p.dropout for p in points if p.activation == "soi"} == {0.0}
    assert {p.dropout for p in points if p.activation == "relu"} == {0.0, 0.25, 0.5}
    assert spec.trial_count == (2 * 3 + 1) * 3 * 5  # (relu, gelu) × 3 dropouts + soi, × 3 lrs × 5 seeds


def test_specs_carry_the_papers_numbers_and_protocols():
    twitter = load_spec("twitter_pos")
    assert {(n.activation, n.value) for n in twitter.paper_numbers} == {("gelu_tanh", 0.1257), ("relu", 0.1267), ("elu", 0.1291)}
    timit = load_spec("timit")
    assert timit.protocol.report_epoch == "best_val_epoch" and (timit.model.depth, timit.model.width) == (5, 2048)
    cifar = load_spec("cifar10_shallow")
    assert cifar.protocol.retrain_on_full and cifar.data_options.zca and cifar.schedule.start == 100
    wrn = load_spec("cifar100_wrn")
    assert wrn.nesterov and wrn.schedule.kind == "cosine" and wrn.schedule.t0 == 50 and wrn.dropout == [0.3]
    elu = load_spec("elu_mnist_learning")
    assert elu.activation_stats and elu.optimizer == "sgd" and elu.model.init == "he" and elu.lr == [0.01]


def test_the_gelu_papers_experiments_use_its_tanh_approximation():
    # GELU paper: "we use the approximation 0.5x(1 + tanh[...]) in every experiment"
    for name in sorted(ALL_EXPERIMENTS):
        spec = load_spec(name)
        if spec.paper != "gelu":
            continue
        assert "gelu" not in spec.activation, name
        assert "gelu" not in {n.activation for n in spec.paper_numbers}, name
        if "soi" not in spec.activation:
            assert "gelu_tanh" in spec.activation, name


def test_mnist_7layer_is_the_earlier_versions_protocol():
    spec = load_spec("mnist_7layer")
    assert (spec.model.depth, spec.model.width, spec.model.init) == (7, 128, "unit_norm_rows")
    assert (spec.optimizer, spec.lr, spec.batch_size, spec.epochs) == ("adam", [1e-3], 128, 50)
    assert spec.dropout == [0.0] and spec.seed_list == [0, 1, 2, 3, 4] and spec.trial_count == 15


def test_robustness_evaluates_the_figure_2_classifiers_themselves():
    # Figure 3 is the no-dropout classifiers of Figure 2: same training settings, same noise levels,
    # so mnist_robustness's trials are a subset of mnist_classification's (the same trial keys).
    fig2, fig3 = load_spec("mnist_classification"), load_spec("mnist_robustness")
    assert fig2.trial_base() | {"experiment": ""} == fig3.trial_base() | {"experiment": ""}
    assert set(fig3.grid_points()) <= set(fig2.grid_points())


def test_noise_levels_must_name_distinct_metrics():
    with pytest.raises(SpecError, match="eval_noise: distinct finite levels"):
        load_spec("mnist_robustness", overrides={"eval_noise": [0.25, 0.2500000001]})


def test_elu_experiments_carry_the_papers_section_numbers():
    sections = {name: load_spec(name).section.split(",")[0] for name in ALL_EXPERIMENTS if name.startswith("elu_")}
    assert sections == {"elu_mnist_learning": "§4.1.1", "elu_mnist_autoencoder": "§4.1.2",
                        "elu_cifar100_11layer": "§4.2", "elu_cifar_18layer": "§4.3", "elu_imagenet": "§4.3.1"}


def test_elu_cifar_schedules_by_iteration():
    eleven = load_spec("elu_cifar100_11layer")
    assert (eleven.schedule.unit, eleven.schedule.milestones) == ("iteration", [35000, 85000, 135000])
    assert [eleven.lr[0] * f for f in eleven.schedule.factors][1:] == pytest.approx([0.015, 0.0015, 0.00015])
    assert eleven.epochs * 50_000 // eleven.batch_size == 165_000  # 165k iterations on all 50k images
    assert (eleven.weight_decay, eleven.momentum) == (5e-4, 0.9)
    eighteen = load_spec("elu_cifar_18layer")
    assert (eighteen.lr, eighteen.schedule.milestones, eighteen.schedule.gamma) == ([0.01], [35000], 0.1)
    assert [(p.from_iteration, p.dropout_on, p.dropout_scale) for p in eighteen.fine_tune] == [
        (35000, "every_layer", 1.0), (85000, "every_layer", 1.5)]  # 50k, then 40k more
    assert {n.dataset: n.value for n in eighteen.paper_numbers} == {"cifar100": 0.2428, "cifar10": 0.0655}


def test_specs_train_on_all_the_data_where_the_paper_did():
    for name in ("cifar100_wrn", "elu_cifar100_11layer", "elu_cifar_18layer"):
        assert load_spec(name).val_size == 0, name
    assert load_spec("cifar10_shallow").protocol.retrain_on_full  # lr chosen on 5k, then retrained on 50k
    with pytest.raises(SpecError, match="val_size 0 trains on all the training data and leaves nothing to choose"):
        load_spec("cifar100_wrn", overrides={"lr": [0.1, 0.05]})


def test_activation_entries_become_canonical_names_everywhere_in_a_spec():
    from search_spaces.catalog import load_catalog_spec, parse_set_options

    overrides = parse_set_options(["activation=relu,gelu(sigma=0.50, mu=0),mish", "slice.activation=gelu(sigma=0.5),relu",
                                   "expressions.mish=x*tanh(softplus(x))"])
    spec = load_catalog_spec("mnist_classification", overrides=overrides)
    assert spec.activation == ["relu", "gelu(sigma=0.5)", "mish"]
    assert spec.expressions == {"mish": "x * tanh(softplus(x))"}
    assert {p.activation for p in spec.grid_points()} == {"relu", "gelu(sigma=0.5)"} and spec.trial_count == 60
    again = type(spec).model_validate(spec.model_dump())  # what a sweep record stores reads back the same
    assert again.activation == spec.activation and again.expressions == spec.expressions
    axis = load_catalog_spec("mnist_classification", overrides={"activation": [{"name": "elu", "alpha": [0.5, 1, 2]}]})
    assert axis.activation == ["elu(alpha=0.5)", "elu", "elu(alpha=2)"]
