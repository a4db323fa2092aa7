"""How a candidate is predicted before it is measured: loop-nest features and the XGBoost ranking
model.
"""
