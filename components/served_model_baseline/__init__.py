"""ServedModelBaseline: the model now served, as an ordinary step (no Resolver), and the
Evaluator that accepts its possibly empty output as the regression baseline."""
